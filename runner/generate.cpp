#include "generate.h"

#include "backend.h"
#include "choose.h"
#include "json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

namespace et_cuda_run {

namespace {

using executorch::runtime::MethodMeta;
using executorch::runtime::Tag;

struct DecoderSignature {
  bool has_position = false;  // takes cache_position
  int64_t max_tokens = 0;     // upper bound of T
  int64_t vocab = 0;          // V
};

bool tensor_input(const MethodMeta& meta, size_t i) {
  const auto tag = meta.input_tag(i);
  return tag.ok() && *tag == Tag::Tensor && meta.input_tensor_meta(i).ok();
}

DecoderSignature check_decoder(const MethodMeta& meta, const std::string& model, const std::string& method,
                               size_t tokens) {
  const std::string where = "--generate: method '" + method + "'";
  const std::string shape = "a decoder method takes input_ids int64 [1, T] and optionally cache_position int64 [T]";
  DecoderSignature sig;
  if (meta.num_inputs() < 1 || meta.num_inputs() > 2) {
    fail(model, where + " takes " + std::to_string(meta.num_inputs()) + " inputs; " + shape);
  }
  if (!tensor_input(meta, 0)) fail(model, where + " input 0 is not a tensor; " + shape);
  const auto ids = *meta.input_tensor_meta(0);
  if (ids.scalar_type() != ScalarType::Long || ids.sizes().size() != 2 || ids.sizes()[0] < 1 || ids.sizes()[1] < 1) {
    fail(model, where + " input 0 is " + dtype_name(ids.scalar_type()) + " " + shape_str(ids.sizes()) +
                    ", not int64 token ids [1, T]");
  }
  sig.max_tokens = ids.sizes()[1];
  if (meta.num_inputs() == 2) {
    if (!tensor_input(meta, 1)) fail(model, where + " input 1 is not a tensor; " + shape);
    const auto pos = *meta.input_tensor_meta(1);
    if (pos.scalar_type() != ScalarType::Long || pos.sizes().size() != 1 || pos.sizes()[0] < 1) {
      fail(model, where + " input 1 is " + dtype_name(pos.scalar_type()) + " " + shape_str(pos.sizes()) +
                      ", not int64 cache positions [T]");
    }
    sig.has_position = true;
    sig.max_tokens = std::min<int64_t>(sig.max_tokens, pos.sizes()[0]);
  }
  if (meta.num_outputs() < 1) fail(model, where + " returns nothing; a decoder method returns logits [1, T, V]");
  const auto logits = meta.output_tensor_meta(0);
  if (!logits.ok()) fail(model, where + " output 0 is not a tensor; a decoder method returns logits [1, T, V]");
  const auto ls = logits->sizes();
  if (!is_floating(logits->scalar_type()) || ls.size() < 2 || ls.size() > 3 || ls[ls.size() - 1] < 1) {
    fail(model, where + " output 0 is " + dtype_name(logits->scalar_type()) + " " + shape_str(ls) +
                    ", not float logits [1, T, V]");
  }
  sig.vocab = ls[ls.size() - 1];
  if (static_cast<int64_t>(tokens) > sig.max_tokens) {
    fail(model, where + " takes at most " + std::to_string(sig.max_tokens) + " tokens per call (input_ids bound " +
                    shape_str(ids.sizes()) + "), " + std::to_string(tokens) + " given");
  }
  return sig;
}

// get_max_seq_len, a constant method of ExecuTorch's LLM exports: 0 when the
// program has none or it returns no integer.
int64_t program_max_seq_len(Module& module) {
  const auto names = module.method_names();
  if (!names.ok() || names->count("get_max_seq_len") == 0) return 0;
  const auto meta = module.method_meta("get_max_seq_len");
  if (!meta.ok() || meta->num_inputs() != 0) return 0;
  const auto out = module.execute("get_max_seq_len");
  if (!out.ok() || out->empty() || !(*out)[0].isInt()) return 0;
  return (*out)[0].toInt();
}

// Text for the terminal: control characters other than newline and tab
// escaped as sanitize() does, the rest (valid UTF-8) as it is.
std::string printable(const std::string& text) {
  std::string out, run;
  for (char c : text) {
    if (c == '\n' || c == '\t') {
      out += sanitize(run);
      out += c;
      run.clear();
    } else {
      run += c;
    }
  }
  return out + sanitize(run);
}

std::vector<EValue> step(Module& module, const std::string& model, const std::string& method, bool has_position,
                         std::vector<int64_t>& ids, std::vector<int64_t>& positions) {
  const auto n = static_cast<SizesType>(ids.size());
  auto ids_tensor = executorch::extension::from_blob(ids.data(), {1, n}, ScalarType::Long);
  std::vector<EValue> inputs{EValue(*ids_tensor)};
  TensorPtr pos_tensor;
  if (has_position) {
    pos_tensor = executorch::extension::from_blob(positions.data(), {n}, ScalarType::Long);
    inputs.emplace_back(*pos_tensor);
  }
  return execute(module, model, method, inputs);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

GeneratePlan plan_generate(Module& module, const Args& a, const Manifest* manifest, const Tokenizer* tokenizer) {
  const GenerateSpec none;
  const GenerateSpec& spec = manifest != nullptr ? manifest->generate : none;
  GeneratePlan p;
  p.tokenizer = tokenizer;
  p.stop = a.stop;
  p.sampling.temperature = a.temperature;
  p.sampling.top_p = a.top_p;
  p.sampling.seed = a.seed;
  p.sample_on_host = a.sample_on_host;
  p.overlap = !a.no_overlap;
  const std::string bad_sampling = check_sampling(p.sampling);
  if (!bad_sampling.empty()) usage_error("--temperature/--top-p", bad_sampling);
  p.steps = a.generate;
  p.rounds = a.generate_rounds;
  p.prefill_method = !a.prefill_method.empty() ? a.prefill_method : spec.prefill_method;
  p.decode_method = !a.decode_method.empty() ? a.decode_method : spec.decode_method;
  p.prompt = a.have_prompt_ids ? a.prompt_ids : spec.prompt_ids;
  // The manifest's tokens follow its own prompt, not a --prompt text.
  p.expected = a.have_expect_tokens ? a.expect_tokens : a.have_prompt ? std::vector<int64_t>{} : spec.tokens;
  p.check = !p.expected.empty();
  p.max_seq_len = spec.max_seq_len;
  if (p.prompt.empty()) {
    usage_error("--generate", "no prompt: give --prompt-ids, --prompt or a manifest with generate.prompt_ids");
  }
  const std::string& model = a.model;
  const auto prompt_len = static_cast<int64_t>(p.prompt.size());
  if (a.seq_len > 0 && prompt_len >= a.seq_len) {
    fail("--seq_len", "the prompt has " + std::to_string(prompt_len) + " tokens, --seq_len is " +
                          std::to_string(a.seq_len) + ": no room for a new token");
  }
  if (p.max_seq_len <= 0) p.max_seq_len = program_max_seq_len(module);
  if (p.max_seq_len > 0 && prompt_len >= p.max_seq_len) {
    fail(model, "--generate: the prompt has " + std::to_string(prompt_len) +
                    " tokens, the program's cache holds " + std::to_string(p.max_seq_len) +
                    " (max_seq_len): no room for a new token");
  }
  if (p.steps == 0) {
    // --prompt without a count: the default, within the room left.
    p.steps = kDefaultNewTokens;
    if (a.seq_len > 0) p.steps = std::min<int64_t>(p.steps, a.seq_len - prompt_len);
    if (p.max_seq_len > 0) p.steps = std::min<int64_t>(p.steps, p.max_seq_len - prompt_len);
  } else if (a.seq_len > 0) {
    p.steps = std::min<int64_t>(p.steps, a.seq_len - prompt_len);  // --seq_len caps the total
  }
  const MethodMeta prefill = method_meta(module, model, p.prefill_method);
  const MethodMeta decode = method_meta(module, model, p.decode_method);
  const DecoderSignature ps = check_decoder(prefill, model, p.prefill_method, p.prompt.size());
  const DecoderSignature ds = check_decoder(decode, model, p.decode_method, 1);
  if (ps.vocab != ds.vocab) {
    fail(model, "--generate: '" + p.prefill_method + "' has " + std::to_string(ps.vocab) + " logits per token, '" +
                    p.decode_method + "' " + std::to_string(ds.vocab));
  }
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] >= ps.vocab) {
      fail(model, "--generate: prompt token " + std::to_string(i) + " is " + std::to_string(p.prompt[i]) +
                      ", the vocabulary has " + std::to_string(ps.vocab) + " entries");
    }
  }
  const int64_t positions = static_cast<int64_t>(p.prompt.size()) + p.steps - 1;
  if (p.max_seq_len > 0 && positions > p.max_seq_len) {
    fail(model, "--generate: a prompt of " + std::to_string(p.prompt.size()) + " tokens and " +
                    std::to_string(p.steps) + " new tokens need " + std::to_string(positions) +
                    " cache positions, max_seq_len is " + std::to_string(p.max_seq_len));
  }
  return p;
}

namespace {

// One round of --generate: its tokens, where the last was chosen, its clock readings, and the
// library's counters around its decode steps (when it has them).
struct GenerateRound {
  std::vector<int64_t> tokens;
  double sampling_ms = 0;
  bool on_device = false;  // where the last token was chosen
  bool overlapped = false;  // steps queued before the previous token reached the host
  double start_ms = 0, first_token_ms = 0, end_ms = 0;
  bool have_stats = false;
  EtCudaStats s0{}, s1{};
};

// What the decode steps of one round share.
struct DecodeSteps {
  Module& module;
  const std::string& model;
  const GeneratePlan& p;
  bool decode_pos;
  Sampler& sampler;
  GenerateRound& r;
  const std::function<bool(int64_t)>& finished;  // whether the loop ends with a token (prints it)
  int64_t position;                              // the next step's cache position

  // The decode step at the next position on token `id`: its logits' last row.
  LogitsRow run(int64_t id) {
    std::vector<int64_t> ids{id}, pos{position++};
    return logits_row(step(module, model, p.decode_method, decode_pos, ids, pos), model, p.decode_method,
                      p.sample_on_host);
  }
};

// The overlapped loop (after token i - 1 reached the host, chosen by et_cuda_sample_async):
// step i is queued with its token id read on the device from step i - 1's choice
// (ET_CUDA_SAMPLED_TOKEN), and its own choice queued, before step i - 1's token is waited for,
// so the GPU runs step i while the host reads that token and launches the next. When the loop
// stops at an end-of-sequence id or a stop string, the step queued after it is not used. The
// library replaces that id where it copies the input to the device (ET_CUDA_SAMPLED_TOKEN in the
// header says where: the delegate's host inputs, ExecuTorch's host-to-device input copy); an
// operator outside the delegate reading the ids would see INT64_MIN (--no-overlap). A step whose
// logits the device sampler cannot take ends the overlap: its token is chosen on the host and
// the caller's loop goes on waiting. `feeding`: the ticket of token i - 1 (it is in the device's
// feed). After each fed step the library is asked whether an input took that token
// (et_cuda_sample_fed): if not, the step's token ids reached an operator outside the delegate,
// which saw ET_CUDA_SAMPLED_TOKEN, and the loop stops with an error naming --no-overlap.
// Leaves `i` at the index of the next token to produce and `done` when the loop ended.
void overlapped_steps(DecodeSteps& d, uint64_t feeding, long& i, bool& done) {
  GenerateRound& r = d.r;
  bool have_pending = false;
  uint64_t pending = 0;
  for (;; ++i) {
    const bool fed = i < d.p.steps;
    LogitsRow row;
    if (fed) {
      row = d.run(ET_CUDA_SAMPLED_TOKEN);
      if (!sample_fed(d.p.device, feeding)) {
        fail(d.model, "--generate: decode step " + std::to_string(i) + " of '" + d.p.decode_method +
                          "' did not take its token id from the device (an operator outside the CUDA delegate read "
                          "the ids and saw ET_CUDA_SAMPLED_TOKEN): run with --no-overlap");
      }
    }
    const bool queued = fed && row.at == SampleAt::Device;
    const uint64_t next = queued ? queue_token(row, d.p.device, d.sampler, r.sampling_ms) : 0;
    if (have_pending) {
      r.tokens.push_back(wait_token(pending, d.p.device, d.model, d.p.decode_method, r.sampling_ms));
      done = d.finished(r.tokens.back());
      if (done) return;
    }
    if (!fed) return;
    if (!queued) {
      r.tokens.push_back(next_token(row, d.model, d.p.decode_method, d.p.device, d.sampler, r.sampling_ms, r.on_device));
      done = d.finished(r.tokens.back());
      r.overlapped = false;
      ++i;
      return;
    }
    pending = feeding = next;
    have_pending = true;
  }
}

// The prefill, then decode steps until p.steps tokens, an end-of-sequence id or a stop string;
// in text mode the text on stdout as it comes and its "text:" line on `figures`.
GenerateRound generate_round(Module& module, const std::string& model, const GeneratePlan& p, bool prefill_pos,
                             bool decode_pos, bool text, FILE* figures) {
  GenerateRound r;
  std::vector<int64_t>& tokens = r.tokens;
  Sampler sampler(p.sampling);
  TextStream stream;
  std::string why_stop = "max-new-tokens", piece, error;
  if (text && !stream.open(*p.tokenizer, p.stop, error)) fail("--tokenizer", error);
  // Whether generation ends with `token`: an end-of-sequence id, or a stop
  // string in the text; prints the token's text.
  const std::function<bool(int64_t)> finished = [&](int64_t token) {
    if (!text) return false;
    const auto& eos = p.tokenizer->eos_ids();
    if (std::find(eos.begin(), eos.end(), static_cast<uint32_t>(token)) != eos.end()) {
      why_stop = "eos";
      return true;
    }
    if (!stream.push(static_cast<uint32_t>(token), piece, error)) fail("--tokenizer", error);
    std::fputs(printable(piece).c_str(), stdout);
    std::fflush(stdout);
    if (stream.stopped()) why_stop = "stop-string";
    return stream.stopped();
  };
  r.start_ms = steady_ms();
  std::vector<int64_t> ids = p.prompt, positions(p.prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  const LogitsRow first =
      logits_row(step(module, model, p.prefill_method, prefill_pos, ids, positions), model, p.prefill_method,
                 p.sample_on_host);
  // Overlapped where the token is chosen on the device and the library can queue the choice:
  // token 0 through et_cuda_sample_async too, so the device's feed holds it for step 1.
  r.overlapped = p.overlap && first.at == SampleAt::Device && can_sample_async();
  uint64_t ticket = 0;  // token 0's, in the device's feed for step 1 when overlapped
  if (r.overlapped) {
    r.on_device = true;
    ticket = queue_token(first, p.device, sampler, r.sampling_ms);
    tokens.push_back(wait_token(ticket, p.device, model, p.prefill_method, r.sampling_ms));
  } else {
    tokens.push_back(next_token(first, model, p.prefill_method, p.device, sampler, r.sampling_ms, r.on_device));
  }
  r.first_token_ms = steady_ms();
  bool done = finished(tokens.back());
  r.have_stats = stats_snapshot(r.s0);
  DecodeSteps d{module, model, p, decode_pos, sampler, r, finished, static_cast<int64_t>(p.prompt.size())};
  long i = 1;  // the index of the next token
  if (r.overlapped && !done) overlapped_steps(d, ticket, i, done);
  for (; i < p.steps && !done; ++i) {
    const LogitsRow row = d.run(tokens.back());
    tokens.push_back(next_token(row, model, p.decode_method, p.device, sampler, r.sampling_ms, r.on_device));
    done = finished(tokens.back());
  }
  r.end_ms = steady_ms();
  r.have_stats = r.have_stats && stats_snapshot(r.s1);
  mem_sample();
  if (text) {
    if (!stream.finish(piece, error)) fail("--tokenizer", error);
    std::fputs((printable(piece) + "\n").c_str(), stdout);
    std::fflush(stdout);
    const std::string sampling =
        sampler.greedy() ? std::string("greedy")
                         : "temperature=" + fixed(p.sampling.temperature, 3) + " top_p=" + fixed(p.sampling.top_p, 3) +
                               " seed=" + std::to_string(p.sampling.seed);
    std::fprintf(figures, "text: stop=%s prompt_tokens=%zu new_tokens=%zu sampling=%s prompt_ids=%s\n",
                 why_stop.c_str(), p.prompt.size(), tokens.size(), sampling.c_str(), join_ints(p.prompt).c_str());
  }
  return r;
}

// The round's "generate" line (text or JSON); whether its tokens match the expected ones.
bool report_round(const GeneratePlan& p, long round, const GenerateRound& r, FILE* figures) {
  const std::vector<int64_t>& tokens = r.tokens;
  const double start_ms = r.start_ms, first_token_ms = r.first_token_ms, end_ms = r.end_ms;
  const double sampling_ms = r.sampling_ms;
  const bool have_stats = r.have_stats, on_device = r.on_device;
  const EtCudaStats &s0 = r.s0, &s1 = r.s1;
  const long decoded = static_cast<long>(tokens.size()) - 1;
  const double prefill_s = (first_token_ms - start_ms) / 1e3, decode_s = (end_ms - first_token_ms) / 1e3;
  // NaN where there is no figure: "n/a" in the text line, null in the JSON one.
  const double rate_v = decoded > 0 && decode_s > 0 ? static_cast<double>(decoded) / decode_s : std::nan("");
  const double waits_v = have_stats && decoded > 0
                             ? static_cast<double>(s1.host_waits - s0.host_waits) / static_cast<double>(decoded)
                             : std::nan("");
  const std::string decode_rate = std::isnan(rate_v) ? "n/a" : fixed(rate_v, 1);
  const std::string waits = std::isnan(waits_v) ? "n/a" : fixed(waits_v, 2);
  bool match = true;
  std::vector<int64_t> expected;
  if (p.check) {
    const size_t k = std::min(tokens.size(), p.expected.size());
    expected.assign(p.expected.begin(), p.expected.begin() + static_cast<std::ptrdiff_t>(k));
    match = std::equal(expected.begin(), expected.end(), tokens.begin());
  }
  // Earlier rounds get their own prefix; the last one is the "generate:" line tools read.
  const std::string prefix =
      round < p.rounds ? "generate (round " + std::to_string(round) + " of " + std::to_string(p.rounds) + ")"
                       : "generate";
  if (json()) {
    JsonLine j("generate");
    j.integer("round", round).integer("rounds", p.rounds).str("prefill", p.prefill_method);
    j.str("decode", p.decode_method).integer("prompt_tokens", static_cast<long long>(p.prompt.size()));
    j.integer("new_tokens", static_cast<long long>(tokens.size())).num("ttft_ms", first_token_ms - start_ms);
    j.num("prefill_tok_s", prefill_s > 0 ? static_cast<double>(p.prompt.size()) / prefill_s : 0.0);
    j.num("decode_tok_s", rate_v).num("host_waits_per_token", waits_v);  // NaN: null
    j.str("sampler", on_device ? "device" : "host").boolean("overlap", r.overlapped);
    j.num("sampling_us_per_token", tokens.empty() ? 0.0 : sampling_ms * 1e3 / static_cast<double>(tokens.size()));
    j.ints("tokens", tokens);
    if (p.check) j.ints("expected", expected);
    else j.null("expected");
    j.str("verdict", p.check ? (match ? "MATCH" : "MISMATCH") : "UNCHECKED").print(figures);
  } else {
    std::fprintf(
        figures, "%s: prefill=%s decode=%s prompt_tokens=%zu new_tokens=%zu ttft_ms=%.3f prefill_tok_s=%.1f "
        "decode_tok_s=%s host_waits_per_token=%s sampler=%s overlap=%s sampling_us_per_token=%.1f rounds=%ld "
        "tokens=%s "
        "expected=%s %s\n",
        prefix.c_str(), p.prefill_method.c_str(), p.decode_method.c_str(), p.prompt.size(), tokens.size(),
        first_token_ms - start_ms, prefill_s > 0 ? static_cast<double>(p.prompt.size()) / prefill_s : 0.0,
        decode_rate.c_str(), waits.c_str(), on_device ? "device" : "host", r.overlapped ? "yes" : "no",
        tokens.empty() ? 0.0 : sampling_ms * 1e3 / static_cast<double>(tokens.size()), p.rounds, join_ints(tokens).c_str(),
        p.check ? join_ints(expected).c_str() : "none", p.check ? (match ? "MATCH" : "MISMATCH") : "UNCHECKED");
  }
  return match;
}

// The round's "generate-lib" line: the library's host time per decode execute.
void report_lib_round(const GeneratePlan& p, long round, const GenerateRound& r, FILE* figures) {
  const bool have_stats = r.have_stats;
  const EtCudaStats &s0 = r.s0, &s1 = r.s1;
  // The library's host time per decode execute (this project's backend only): what the
  // decode steps above added to its counters, so the prefill and earlier rounds are left out.
  if (have_stats && s1.executes > s0.executes) {
    const double n = static_cast<double>(s1.executes - s0.executes);
    const double exec_us = static_cast<double>(s1.execute_host_ns - s0.execute_host_ns) / n / 1e3;
    const double run_us = static_cast<double>(s1.run_host_ns - s0.run_host_ns) / n / 1e3;
    const auto replays = static_cast<unsigned long long>(s1.graph_replays - s0.graph_replays);
    const auto captures = static_cast<unsigned long long>(s1.graph_captures - s0.graph_captures);
    if (json()) {
      JsonLine("generate-lib")
          .integer("round", round)
          .integer("decode_executes", static_cast<long long>(n))
          .num("lib_execute_us", exec_us)
          .num("run_us", run_us)
          .integer("graph_replays", static_cast<long long>(replays))
          .integer("graph_captures", static_cast<long long>(captures))
          .print(figures);
    } else {
      const std::string lib_prefix =
          round < p.rounds ? "generate-lib (round " + std::to_string(round) + " of " + std::to_string(p.rounds) + ")"
                           : "generate-lib";
      std::fprintf(figures,
                   "%s: decode_executes=%llu lib_execute_us=%.2f run_us=%.2f graph_replays=%llu graph_captures=%llu\n",
                   lib_prefix.c_str(), static_cast<unsigned long long>(n), exec_us, run_us, replays, captures);
    }
  }
}

// The last round's PyTorchObserver line.
void print_observer(const GeneratePlan& p, const GenerateRound& r, double load_start_ms, double load_end_ms,
                    FILE* figures) {
  const std::vector<int64_t>& tokens = r.tokens;
  const double start_ms = r.start_ms, first_token_ms = r.first_token_ms, end_ms = r.end_ms;
  const double sampling_ms = r.sampling_ms;
  // Upstream's LLM runner stats (extension/llm/runner): the same keys, in
  // milliseconds on the steady clock; ours keep fractions of a millisecond.
  std::fprintf(
      figures, "PyTorchObserver {\"prompt_tokens\":%zu,\"generated_tokens\":%zu,\"model_load_start_ms\":%.3f,"
      "\"model_load_end_ms\":%.3f,\"inference_start_ms\":%.3f,\"inference_end_ms\":%.3f,\"prompt_eval_end_ms\":%.3f,"
      "\"first_token_ms\":%.3f,\"aggregate_sampling_time_ms\":%.3f,\"SCALING_FACTOR_UNITS_PER_SECOND\":1000}\n",
      p.prompt.size(), tokens.size(), load_start_ms, load_end_ms, start_ms, end_ms, first_token_ms, first_token_ms,
      sampling_ms);
}

}  // namespace

bool run_generate(Module& module, const std::string& model, const GeneratePlan& p, double load_start_ms) {
  const MethodMeta prefill_meta = method_meta(module, model, p.prefill_method);
  const MethodMeta decode_meta = method_meta(module, model, p.decode_method);
  const bool prefill_pos = prefill_meta.num_inputs() == 2, decode_pos = decode_meta.num_inputs() == 2;
  load_method(module, model, p.prefill_method);
  if (p.decode_method != p.prefill_method) load_method(module, model, p.decode_method);
  const double load_end_ms = steady_ms();

  // Text mode: the text on stdout as it comes, the figures on stderr.
  const bool text = p.tokenizer != nullptr;
  FILE* figures = text ? stderr : stdout;
  bool all_match = true;
  for (long round = 1; round <= p.rounds; ++round) {
    const GenerateRound r = generate_round(module, model, p, prefill_pos, decode_pos, text, figures);
    const bool match = report_round(p, round, r, figures);
    all_match = all_match && match;
    report_lib_round(p, round, r, figures);
    if (round < p.rounds) continue;
    print_observer(p, r, load_start_ms, load_end_ms, figures);
  }
  return all_match;
}

}  // namespace et_cuda_run
