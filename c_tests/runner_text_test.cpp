// et_cuda_run's text pieces on the CPU: the tokenizer library through its C
// API and the runner's wrapper (runner/text.cpp), stop strings, and the
// sampler with its seeded generator (runner/sampling.cpp).
//   runner_text_test <tokenizer/testdata folder>
#include "../runner/json.h"
#include "../runner/sampling.h"
#include "../runner/text.h"

#include <etc_tokenizer.h>
#include <executorch_cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace et_cuda_run;

static int failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

static std::string data_dir;

static std::unique_ptr<Tokenizer> load(const std::string& name) {
  std::string error;
  auto t = Tokenizer::load(data_dir + "/" + name, error);
  if (!t) std::fprintf(stderr, "%s: %s\n", name.c_str(), error.c_str());
  return t;
}

// Generates `text` token by token through a TextStream with `stops`; returns
// what was printed and whether it stopped.
static std::string generate(const Tokenizer& tok, const std::string& text, const std::vector<std::string>& stops,
                            bool& stopped, size_t& tokens_used, size_t* tokens_total = nullptr) {
  std::vector<uint32_t> ids;
  std::string error, out, piece;
  CHECK(tok.encode(text, ids, error));
  TextStream s;
  CHECK(s.open(tok, stops, error));
  tokens_used = 0;
  if (tokens_total != nullptr) *tokens_total = ids.size();
  for (uint32_t id : ids) {
    ++tokens_used;
    CHECK(s.push(id, piece, error));
    out += piece;
    if (s.stopped()) break;
  }
  CHECK(s.finish(piece, error));
  out += piece;
  stopped = s.stopped();
  CHECK(out == s.text());
  return out;
}

static void tokenizer_tests() {
  std::string error;
  CHECK(!Tokenizer::load(data_dir + "/no_such.json", error));
  CHECK(error.rfind("cannot read: ", 0) == 0);
  CHECK(!Tokenizer::load(data_dir + "/make_tokenizers.py", error));
  CHECK(error.rfind("not a tokenizer.json: ", 0) == 0);
  CHECK(error.find('\n') == std::string::npos);

  auto bpe = load("bpe.json");
  CHECK(bpe != nullptr);
  if (!bpe) return;
  CHECK(bpe->vocab_size() == 500);
  CHECK(bpe->eos_ids().size() == 2);  // <|endoftext|> and <|im_end|>, not <|im_start|>
  std::vector<uint32_t> ids;
  CHECK(bpe->encode("naïve café 🚀", ids, error) && ids.size() > 4);
  CHECK(bpe->encode("", ids, error) && ids.empty());
  // Text that is not UTF-8 is an error, not a crash.
  CHECK(!bpe->encode(std::string("a\xff"), ids, error));
  CHECK(error.rfind("the text is not UTF-8", 0) == 0);

  bool stopped = false;
  size_t used = 0;
  const std::string text = "The runner loads a program. User: more text";
  CHECK(generate(*bpe, text, {}, stopped, used) == text && !stopped);
  size_t total = 0;
  CHECK(generate(*bpe, text, {"User:"}, stopped, used, &total) == "The runner loads a program. " && stopped);
  CHECK(used + 2 < total);  // it stopped before the end of the tokens
  // The earliest of several stop strings wins; one that never comes does nothing.
  CHECK(generate(*bpe, text, {"more", "loads"}, stopped, used) == "The runner " && stopped);
  CHECK(generate(*bpe, text, {"absent"}, stopped, used) == text && !stopped);
  // A stop string's start at the end is held back, then released when it does not go on.
  CHECK(generate(*bpe, "ab🚀 c", {"🚀x"}, stopped, used) == "ab🚀 c" && !stopped);
  CHECK(generate(*bpe, "ab🚀x c", {"🚀x"}, stopped, used) == "ab" && stopped);

  auto uni = load("unigram.json");
  auto wp = load("wordpiece.json");
  CHECK(uni && uni->eos_ids().size() == 1);
  CHECK(wp && wp->eos_ids().empty());
  if (uni) CHECK(generate(*uni, "The runner loads a program.", {}, stopped, used) == "The runner loads a program.");
  if (wp) CHECK(generate(*wp, "The runner loads a program.", {}, stopped, used) == "the runner loads a program.");
}

// Issue 31: a hostile tokenizer.json is refused at load (it used to load, and every encode
// then died on a 4 TiB allocation: SIGABRT); an empty encoding into a fresh vector (a null
// buffer) is no error; tokenizer and stream handles freed twice are errors, not crashes.
static void tokenizer_limit_and_handle_tests() {
  std::ifstream in(data_dir + "/bpe.json", std::ios::binary);
  std::string json((std::istreambuf_iterator<char>(in)), {});
  const std::string from = "\"padding\":null";
  const size_t at = json.find(from);
  CHECK(at != std::string::npos);
  if (at == std::string::npos) return;
  json.replace(at, from.size(),
               "\"padding\":{\"strategy\":{\"Fixed\":1099511627776},\"direction\":\"Right\","
               "\"pad_to_multiple_of\":null,\"pad_id\":0,\"pad_type_id\":0,\"pad_token\":\"<pad>\"}");
  const std::string path = "runner_text_test_hostile_tokenizer.json";
  std::ofstream(path, std::ios::binary) << json;
  std::string error;
  CHECK(!Tokenizer::load(path, error));
  CHECK(error == "tokenizer.json refused: padding.strategy.Fixed: 1099511627776, at most 131072");
  CHECK(ETC_TOK_MAX_SEQUENCE == 131072);  // the header states the limits
  std::remove(path.c_str());

  auto bpe = load("bpe.json");
  CHECK(bpe != nullptr);
  if (!bpe) return;
  std::vector<uint32_t> fresh;  // data() is null: the C API gets a null buffer on both calls
  CHECK(bpe->encode("", fresh, error) && fresh.empty());

  EtcTokenizer* tok = nullptr;
  CHECK(etc_tok_load((data_dir + "/bpe.json").c_str(), &tok, nullptr, 0) == ETC_TOK_OK);
  EtcTokStream* stream = nullptr;
  CHECK(etc_tok_stream_new(tok, true, &stream, nullptr, 0) == ETC_TOK_OK);
  CHECK(etc_tok_free(tok) == ETC_TOK_OK);
  CHECK(etc_tok_free(tok) == ETC_TOK_INVALID_ARGUMENT);
  char err[256] = {0};
  size_t n = 0;
  CHECK(etc_tok_encode(tok, "x", 1, false, nullptr, 0, &n, err, sizeof(err)) == ETC_TOK_INVALID_ARGUMENT);
  CHECK(std::strstr(err, "is not a live handle") != nullptr);
  CHECK(etc_tok_stream_free(stream) == ETC_TOK_OK);
  CHECK(etc_tok_stream_free(stream) == ETC_TOK_INVALID_ARGUMENT);
}

// Issue 31: the temperature rule shared with the device sampler, and where a row is sampled.
static void temperature_rule_tests() {
  SamplingParams p;
  for (double t : {0.0, 1e-6, 0.7, 1.0, 1e6}) {
    p.temperature = t;
    CHECK(check_sampling(p).empty());
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (double t : {3e-39, 1e-7, 9.99e-7, 1.000001e6, 1e45, -1.0, inf, -inf, std::nan("")}) {
    p.temperature = t;
    const std::string why = check_sampling(p);
    CHECK(why.find("outside the rule: 0 (greedy), or finite within [1e-06, 1e+06]") != std::string::npos);
  }
  p.temperature = 3e-39;
  CHECK(check_sampling(p).rfind("temperature 3e-39 ", 0) == 0);
  p.temperature = 1;
  p.top_p = 0;
  CHECK(check_sampling(p) == "top_p 0 is outside (0, 1]");

  // Below the rule the host sampler computed 1/T = inf, NaN weights and a NaN cast to an
  // integer (undefined behaviour); now it declines, as the runner refuses such a flag.
  std::vector<double> row(1000);
  for (size_t v = 0; v < row.size(); ++v) row[v] = std::sin(static_cast<double>(v) * 0.37) * 4;
  for (double t : {3e-39, 1e45}) {
    SamplingParams q;
    q.temperature = t;
    Sampler s(q);
    CHECK(s.pick(row) == -1);
  }
  // At the bounds: 1e-6 is the argmax; 1e6 samples nearly uniformly (the device sampler
  // turned greedy at 1e45; within the rule both agree, see sampling_tests' reference).
  SamplingParams lo;
  lo.temperature = 1e-6;
  Sampler cold(lo);
  for (int i = 0; i < 50; ++i) CHECK(cold.pick(row) == argmax(row));
  SamplingParams hi;
  hi.temperature = 1e6;
  Sampler hot(hi);
  std::map<int64_t, int> seen;
  for (int i = 0; i < 200; ++i) ++seen[hot.pick(row)];
  CHECK(seen.size() > 150);

  // Where a row is sampled: --sample-on-host wins; a row past 2^22 goes to the host.
  CHECK(sample_at(true, true, true, false, 151936) == SampleAt::Device);
  CHECK(sample_at(true, true, true, true, 151936) == SampleAt::Host);
  CHECK(sample_at(true, true, true, false, kMaxDeviceVocab) == SampleAt::Device);
  CHECK(sample_at(true, true, true, false, kMaxDeviceVocab + 1) == SampleAt::HostTooLong);
  CHECK(sample_at(true, true, true, true, kMaxDeviceVocab + 1) == SampleAt::Host);
  CHECK(sample_at(false, true, true, false, 100) == SampleAt::Host);
  CHECK(sample_at(true, false, true, false, 100) == SampleAt::Host);
  CHECK(sample_at(true, true, false, false, 100) == SampleAt::Host);
}

// The library's draw (et_cuda_sample_uniform), which its samplers use.
static double draw(uint64_t seed, uint64_t step) {
  double u = -1;
  CHECK(et_cuda_sample_uniform(seed, step, &u) == 0);
  return u;
}

// The threshold search's definition (see threshold_search_tests).
static int64_t reference_pick(const std::vector<double>& logits, double t, double top_p, double u) {
  float top = -std::numeric_limits<float>::infinity();
  for (double x : logits) top = std::max(top, static_cast<float>(x));
  const float inv = static_cast<float>(1.0 / t);
  std::vector<uint64_t> w(logits.size());
  std::vector<float> p(logits.size());
  uint64_t total = 0;
  for (size_t v = 0; v < logits.size(); ++v) {
    p[v] = std::exp((static_cast<float>(logits[v]) - top) * inv);
    w[v] = static_cast<uint64_t>(p[v] * 1099511627776.0f);
    total += w[v];
  }
  std::vector<bool> kept(logits.size(), top_p >= 1);
  for (size_t v = 0; v < logits.size(); ++v) kept[v] = kept[v] && w[v] > 0;
  if (top_p < 1) {
    std::vector<size_t> order;
    for (size_t v = 0; v < w.size(); ++v) {
      if (w[v] > 0) order.push_back(v);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    const uint64_t target = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(top_p * static_cast<double>(total))));
    uint64_t acc = 0;
    for (size_t v : order) {
      if (acc >= target) break;
      acc += w[v];
      kept[v] = true;
    }
  }
  uint64_t sum = 0;
  for (size_t v = 0; v < w.size(); ++v) sum += kept[v] ? w[v] : 0;
  uint64_t target = std::min(static_cast<uint64_t>(u * static_cast<double>(sum)), sum - 1);
  uint64_t acc = 0;
  for (size_t v = 0; v < w.size(); ++v) {
    if (!kept[v] || w[v] == 0) continue;
    acc += w[v];
    if (acc > target) return static_cast<int64_t>(v);
  }
  return -2;
}

static void uniform_and_argmax_tests() {
  // The library's et_cuda_sample_uniform gives the same numbers (values from its formula).
  CHECK(draw(42, 7) == 0.9396161429871874);
  CHECK(draw(0, 0) == 0.8833108082136426);
  CHECK(draw(7, 3) == 0.8631908983827007);
  double mean = 0;
  for (int i = 0; i < 1000; ++i) {
    const double u = draw(5, i);
    CHECK(u >= 0 && u < 1);
    mean += u / 1000;
  }
  CHECK(std::abs(mean - 0.5) < 0.05);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(argmax({1, 3, 3, 2}) == 1);  // the first maximum
  CHECK(argmax({1, nan, 5}) == 1);   // NaN counts as the largest
  Sampler greedy(SamplingParams{});
  CHECK(greedy.greedy() && greedy.pick({0.1, 0.9, 0.3}) == 1);
  // The typed row argmax agrees with argmax over the doubles, for f32, bf16 and f16 rows
  // (ties, NaN, infinities, signed zeros, subnormal halves).
  {
    const std::vector<std::vector<float>> rows{{1, 3, 3, 2},         {1, NAN, 5, NAN},      {-INFINITY, -INFINITY},
                                               {-0.0f, 0.0f, -1},    {2, INFINITY, INFINITY}, {5, 4, 3},
                                               {0.25f, -7, 65504, 65504, 1e-7f}};
    auto bf16 = [](float f) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return static_cast<uint16_t>(b >> 16);  // exact for these values
    };
    auto f16 = [](float f) -> uint16_t {  // exact for these values (and NaN/inf/0)
      if (std::isnan(f)) return 0x7e00;
      if (std::isinf(f)) return f > 0 ? 0x7c00 : 0xfc00;
      if (f == 0) return std::signbit(f) ? 0x8000 : 0;
      if (std::fabs(f) < 6.1e-5f) return static_cast<uint16_t>(std::lround(std::fabs(f) / std::ldexp(1.0, -24)));
      int e;
      const float m = std::frexp(std::fabs(f), &e);  // f = m * 2^e, m in [0.5, 1)
      const uint16_t bits = static_cast<uint16_t>(((e + 14) << 10) | (static_cast<int>(std::lround((m * 2 - 1) * 1024)) & 0x3ff));
      return static_cast<uint16_t>(bits | (f < 0 ? 0x8000 : 0));
    };
    for (const auto& r : rows) {
      std::vector<double> d(r.begin(), r.end());
      const int64_t want = argmax(d);
      std::vector<uint8_t> a(4 * r.size()), b(2 * r.size()), h(2 * r.size());
      for (size_t i = 0; i < r.size(); ++i) {
        std::memcpy(&a[4 * i], &r[i], 4);
        const uint16_t x = bf16(r[i]), y = f16(r[i]);
        std::memcpy(&b[2 * i], &x, 2);
        std::memcpy(&h[2 * i], &y, 2);
      }
      CHECK(argmax_row(a.data(), r.size(), RowType::F32) == want);
      CHECK(argmax_row(b.data(), r.size(), RowType::BF16) == want);
      CHECK(argmax_row(h.data(), r.size(), RowType::F16) == want);
    }
    CHECK(argmax_row(nullptr, 0, RowType::F32) == -1);
  }
}

static void temperature_and_top_p_tests() {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Temperature 1 over log-probabilities: frequencies follow them.
  const std::vector<double> logits{std::log(0.5), std::log(0.3), std::log(0.2), nan};
  SamplingParams p;
  p.temperature = 1;
  p.seed = 7;
  Sampler s(p), s2(p);
  std::map<int64_t, int> count;
  std::vector<int64_t> first, second;
  for (int i = 0; i < 20000; ++i) {
    const int64_t t = s.pick(logits);
    ++count[t];
    if (i < 50) first.push_back(t), second.push_back(s2.pick(logits));
  }
  CHECK(first == second);  // the same seed, the same tokens
  CHECK(count.count(3) == 0);  // NaN is never sampled
  CHECK(std::abs(count[0] / 20000.0 - 0.5) < 0.02);
  CHECK(std::abs(count[1] / 20000.0 - 0.3) < 0.02);
  CHECK(std::abs(count[2] / 20000.0 - 0.2) < 0.02);

  // top-p 0.6: only the two most likely (0.5 + 0.3 >= 0.6), renormalised.
  p.top_p = 0.6;
  Sampler top(p);
  count.clear();
  for (int i = 0; i < 20000; ++i) ++count[top.pick(logits)];
  CHECK(count.count(2) == 0);
  CHECK(std::abs(count[0] / 20000.0 - 0.625) < 0.02);
  // A tiny top-p or a tiny temperature is the argmax.
  p.top_p = 1e-9;
  Sampler tiny(p);
  for (int i = 0; i < 100; ++i) CHECK(tiny.pick(logits) == 0);
  p.top_p = 1;
  p.temperature = 1e-6;
  Sampler cold(p);
  for (int i = 0; i < 100; ++i) CHECK(cold.pick({0.0, 1.0, 0.999}) == 1);
  // +inf takes all the mass; nothing to sample is -1.
  p.temperature = 1;
  Sampler edge(p);
  CHECK(edge.pick({0.0, inf, 1.0}) == 1);
  CHECK(edge.pick({nan, -inf}) == -1);
}

static void threshold_search_tests() {
  // The threshold search against the definition it implements: sort the weights (larger
  // first, ties by lower id), keep them until the mass reaches top_p of the total, then
  // the draw's token in id order. Rows with many equal logits exercise the ties.
  int compared = 0, differ = 0;
  for (int row = 0; row < 60; ++row) {
    std::vector<double> logits(50 + 97 * row);
    for (size_t v = 0; v < logits.size(); ++v) {
      // Quantized to quarters over a small range: many exact ties.
      logits[v] = std::floor(draw(1000 + row, v) * 24.0) / 4.0;
    }
    for (double tp : {1.0, 0.95, 0.7, 0.3, 0.01}) {
      SamplingParams q;
      q.temperature = row % 2 ? 0.7 : 1.3;
      q.top_p = tp;
      q.seed = static_cast<uint64_t>(row);
      Sampler s(q);
      for (uint64_t step = 0; step < 20; ++step) {
        const int64_t got = s.pick(logits);
        ++compared;
        if (got != reference_pick(logits, q.temperature, tp, draw(q.seed, step))) ++differ;
      }
    }
  }
  CHECK(compared == 6000);
  CHECK(differ == 0);
}

static void sampling_tests() {
  uniform_and_argmax_tests();
  temperature_and_top_p_tests();
  threshold_search_tests();
}

// --json's line builder: escaping, numbers, nulls, lists.
static void json_tests() {
  using et_cuda_run::JsonLine;
  using et_cuda_run::json_string;
  CHECK(json_string("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_string(std::string("x\n\t\x01\x7f\xc3\xa9", 7)) == "\"x\\n\\t\\u0001\\u007f\xc3\xa9\"");
  const std::string line = JsonLine("case")
                               .str("method", "forward")
                               .num("max_abs_err", 0.25)
                               .num("nan", std::nan(""))
                               .integer("n", -3)
                               .boolean("pass", true)
                               .null("none")
                               .ints("tokens", {1, 22, 333})
                               .ints("empty", {})
                               .text();
  CHECK(line ==
        "{\"kind\":\"case\",\"method\":\"forward\",\"max_abs_err\":0.25,\"nan\":null,\"n\":-3,"
        "\"pass\":true,\"none\":null,\"tokens\":[1,22,333],\"empty\":[]}");
  CHECK(et_cuda_run::json() == false);
  et_cuda_run::set_json(true);
  CHECK(et_cuda_run::json());
  et_cuda_run::set_json(false);
}

int main(int argc, char** argv) {
  data_dir = argc > 1 ? argv[1] : "tokenizer/testdata";
  tokenizer_tests();
  tokenizer_limit_and_handle_tests();
  temperature_rule_tests();
  sampling_tests();
  json_tests();
  if (failures > 0) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("runner text and sampling: all checks passed\n");
  return 0;
}
