// Splitting a log record into pieces that fit ExecuTorch's fixed log buffer
// (adapter/cuda_backend_adapter.cpp), each cut on a UTF-8 character boundary.
// Header-only, so that c_tests/adapter_test.cpp checks it directly.
#pragma once

#include <cstddef>

namespace et_cuda_adapter {

// The end of the piece of `s[from..n)` that holds at most `max` bytes (max >= 4):
// `n` when the rest fits; otherwise the last character boundary at or before
// from + max, so that no piece ends inside a character (a continuation byte,
// 10xxxxxx, never starts a piece). Bytes that are not UTF-8 are cut where they are.
inline size_t log_piece_end(const char* s, size_t n, size_t from, size_t max) {
  if (n - from <= max) return n;
  size_t end = from + max;
  // At most 3 continuation bytes follow a lead byte.
  for (size_t back = 0; back < 3 && end > from + 1; ++back) {
    if ((static_cast<unsigned char>(s[end]) & 0xC0) != 0x80) break;
    --end;
  }
  if ((static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) end = from + max;  // not UTF-8: cut anyway
  return end;
}

}  // namespace et_cuda_adapter
