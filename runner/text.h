// Text in, text out for the token loop: a tokenizer.json (through
// libetc_tokenizer.a, tokenizer/) and the text of a growing generation with
// its stop conditions.
//
// No ExecuTorch here: the tests link this file alone. Errors are returned as
// one-line messages for the caller to report.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct EtcTokenizer;
struct EtcTokStream;

namespace et_cuda_run {

class Tokenizer {
 public:
  // Loads `path`; on failure returns null and sets `error` (one line).
  static std::unique_ptr<Tokenizer> load(const std::string& path, std::string& error);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The prompt's ids, with what the tokenizer's post-processor adds (a BOS
  // token for Llama-style tokenizers). False with `error` set on failure.
  bool encode(const std::string& text, std::vector<uint32_t>& ids, std::string& error) const;
  // The end-of-sequence ids (the rule: tokenizer/src/lib.rs, EOS_TOKENS).
  const std::vector<uint32_t>& eos_ids() const { return eos_; }
  size_t vocab_size() const;
  EtcTokenizer* handle() const { return tok_; }

 private:
  explicit Tokenizer(EtcTokenizer* tok);
  EtcTokenizer* tok_;
  std::vector<uint32_t> eos_;
};

// The text of a generation, token by token: streaming decode (special tokens
// left out), then the stop strings. What `push` returns is safe to print at
// once: text that could be the start of a stop string is held back until the
// next tokens show it is not.
class TextStream {
 public:
  // False with `error` set when the stream cannot be made.
  bool open(const Tokenizer& tok, std::vector<std::string> stops, std::string& error);
  ~TextStream();

  // Feeds one generated id; `out` gets the text to print now. Returns false
  // with `error` set on a decoding error. After a stop string was seen,
  // stopped() is true and `out` ends before it.
  bool push(uint32_t id, std::string& out, std::string& error);
  // At the end of the generation: the text still held back (not a stop string).
  bool finish(std::string& out, std::string& error);
  bool stopped() const { return stopped_; }
  // The whole text so far (stop string and what follows it left out).
  const std::string& text() const { return text_; }

 private:
  // Moves what may be printed from the pending text to `out`.
  void release(std::string& out, bool final);

  EtcTokStream* stream_ = nullptr;
  std::vector<std::string> stops_;
  std::string text_;     // everything printed or pending
  size_t printed_ = 0;   // bytes of text_ released
  bool stopped_ = false;
};

}  // namespace et_cuda_run
