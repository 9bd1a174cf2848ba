// --generate N: a greedy token loop on a decoder program.
//
// Decoder methods take (input_ids int64 [1, T]) or (input_ids, cache_position
// int64 [T]) and return logits [1, T, V] (float32, bfloat16 or float16) as
// output 0; T is dynamic (the method's sizes are its upper bound). The prefill
// method runs once on the prompt (cache_position 0..T-1); its last logits row
// gives token 0. Then N-1 single-token steps run the decode method on the
// previous token (cache_position [prompt length + i - 1]). The KV cache lives
// in the program's mutable buffers: it carries from one execute to the next.
#pragma once

#include "args.h"
#include "manifest.h"
#include "methods.h"
#include "sampling.h"
#include "text.h"

namespace et_cuda_run {

// What the token loop needs, resolved from the flags and the manifest.
struct GeneratePlan {
  long steps = 0;  // N tokens to produce
  long rounds = 1;  // the loop this many times; the last round's figures are reported
  std::string prefill_method, decode_method;
  std::vector<int64_t> prompt;
  bool check = false;  // compare with `expected`
  std::vector<int64_t> expected;
  int64_t max_seq_len = 0;
  SamplingParams sampling;  // greedy unless --temperature > 0
  int32_t device = 0;       // the methods' CUDA device (--option device_index), where the logits are
  bool sample_on_host = false;  // --sample-on-host: logits on the device are copied and sampled on the host
  // Where the token is chosen on the device: queue step i + 1, fed on the device with step i's
  // token, before step i's token reaches the host (et_cuda_sample_async); --no-overlap: off.
  bool overlap = true;
  // Text mode (--tokenizer): the new tokens are printed as text on stdout,
  // the figures go to stderr, and the loop stops at an end-of-sequence id or
  // a stop string.
  const Tokenizer* tokenizer = nullptr;
  std::vector<std::string> stop;
};

// The default number of new tokens with --prompt and neither --generate nor
// --max-new-tokens (fewer when --seq_len or the cache leave less room).
constexpr long kDefaultNewTokens = 128;

// Resolves the plan and checks it against the methods' signatures (int64 ids
// within the T bound, float logits, prompt ids below the vocabulary size,
// positions within max_seq_len): everything that needs no GPU.
// A program's cache length, when it says: max_seq_len in the manifest's
// generate section, else the program's constant method get_max_seq_len (run on
// the host; ExecuTorch's LLM exports carry one).
GeneratePlan plan_generate(Module& module, const Args& a, const Manifest* manifest,
                           const Tokenizer* tokenizer = nullptr);

// Loads the methods and runs the loop; prints the "generate: ..." and the
// "PyTorchObserver {...}" lines. Returns whether the tokens matched (true when
// nothing was given to compare with).
bool run_generate(Module& module, const std::string& model, const GeneratePlan& plan, double load_start_ms);

}  // namespace et_cuda_run
