#include "text.h"

#include <etc_tokenizer.h>

#include <algorithm>

namespace et_cuda_run {

namespace {
constexpr size_t kErr = 512;
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path, std::string& error) {
  char err[kErr] = {0};
  EtcTokenizer* tok = nullptr;
  if (etc_tok_load(path.c_str(), &tok, err, sizeof(err)) != ETC_TOK_OK) {
    error = err;
    return nullptr;
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer(tok));
  size_t n = 0;
  if (etc_tok_eos_ids(tok, nullptr, 0, &n, nullptr, 0) == ETC_TOK_BUFFER_TOO_SMALL && n > 0) {
    t->eos_.resize(n);
    if (etc_tok_eos_ids(tok, t->eos_.data(), n, &n, err, sizeof(err)) != ETC_TOK_OK) {
      error = err;
      return nullptr;
    }
  }
  return t;
}

Tokenizer::Tokenizer(EtcTokenizer* tok) : tok_(tok) {}

Tokenizer::~Tokenizer() {
  etc_tok_free(tok_);
}

size_t Tokenizer::vocab_size() const {
  return etc_tok_vocab_size(tok_);
}

bool Tokenizer::encode(const std::string& text, std::vector<uint32_t>& ids, std::string& error) const {
  char err[kErr] = {0};
  size_t n = 0;
  EtcTokStatus st = etc_tok_encode(tok_, text.data(), text.size(), true, nullptr, 0, &n, err, sizeof(err));
  if (st == ETC_TOK_BUFFER_TOO_SMALL) {
    ids.resize(n);
    st = etc_tok_encode(tok_, text.data(), text.size(), true, ids.data(), n, &n, err, sizeof(err));
  } else if (st == ETC_TOK_OK) {
    ids.clear();  // nothing to write: no ids
  }
  if (st != ETC_TOK_OK) {
    error = err;
    return false;
  }
  ids.resize(n);
  return true;
}

bool TextStream::open(const Tokenizer& tok, std::vector<std::string> stops, std::string& error) {
  char err[kErr] = {0};
  if (etc_tok_stream_new(tok.handle(), true, &stream_, err, sizeof(err)) != ETC_TOK_OK) {
    error = err;
    return false;
  }
  stops_ = std::move(stops);
  return true;
}

TextStream::~TextStream() {
  etc_tok_stream_free(stream_);
}

void TextStream::release(std::string& out, bool final) {
  // The first stop string in the text: the text ends before it.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t from = printed_ >= s.size() ? printed_ - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    cut = std::max(cut, printed_);  // (never reached: released text holds no stop string)
    text_.resize(cut);
    out.append(text_, printed_, std::string::npos);
    printed_ = text_.size();
    return;
  }
  // Hold back the longest end of the text that a stop string starts with.
  size_t hold = 0;
  if (!final) {
    for (const std::string& s : stops_) {
      for (size_t k = std::min(s.size() - 1, text_.size() - printed_); k > hold; --k) {
        if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
  }
  const size_t end = text_.size() - hold;
  out.append(text_, printed_, end - printed_);
  printed_ = end;
}

bool TextStream::push(uint32_t id, std::string& out, std::string& error) {
  out.clear();
  if (stopped_) return true;
  char err[kErr] = {0};
  const char* piece = nullptr;
  size_t len = 0;
  if (etc_tok_stream_push(stream_, id, &piece, &len, err, sizeof(err)) != ETC_TOK_OK) {
    error = err;
    return false;
  }
  text_.append(piece, len);
  release(out, false);
  return true;
}

bool TextStream::finish(std::string& out, std::string& error) {
  out.clear();
  if (stopped_) return true;
  char err[kErr] = {0};
  const char* piece = nullptr;
  size_t len = 0;
  if (etc_tok_stream_finish(stream_, &piece, &len, err, sizeof(err)) != ETC_TOK_OK) {
    error = err;
    return false;
  }
  text_.append(piece, len);
  release(out, true);
  return true;
}

}  // namespace et_cuda_run
