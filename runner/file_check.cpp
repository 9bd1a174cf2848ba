#include "file_check.h"

#include "common.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

namespace et_cuda_run {

namespace {

constexpr size_t kHeadBytes = 64;
constexpr size_t kIdentifierOffset = 4;
constexpr size_t kHeaderOffset = 8;
constexpr const char* kProgramIdentifier = "ET12";

struct Head {
  uint64_t file_size = 0;
  size_t n = 0;  // bytes read into `bytes`
  unsigned char bytes[kHeadBytes] = {};

  uint32_t u32(size_t at) const {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<size_t>(i)];
    return v;
  }
  uint64_t u64(size_t at) const {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<size_t>(i)];
    return v;
  }
  bool has(size_t at, const char* magic) const {
    return n >= at + 4 && std::memcmp(bytes + at, magic, 4) == 0;
  }
  // The 4 bytes at `at`, printable (escaped where not).
  std::string quoted(size_t at) const {
    return "'" + sanitize(std::string(reinterpret_cast<const char*>(bytes + at), 4)) + "'";
  }
};

Head read_head(const std::string& path) {
  Head h;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  h.file_size = static_cast<uint64_t>(st.st_size);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  in.read(reinterpret_cast<char*>(h.bytes), kHeadBytes);
  h.n = static_cast<size_t>(in.gcount());
  return h;
}

std::string bytes_str(uint64_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

}  // namespace

void check_program_file(const std::string& path) {
  const Head h = read_head(path);
  const std::string no = "not an ExecuTorch program: ";
  if (h.file_size < kHeaderOffset) {
    fail(path, no + "the file has " + bytes_str(h.file_size) + ", fewer than a program's header");
  }
  const bool et_like = h.bytes[4] == 'E' && h.bytes[5] == 'T' && h.bytes[6] >= '0' && h.bytes[6] <= '9' &&
                       h.bytes[7] >= '0' && h.bytes[7] <= '9';
  if (!et_like) {
    fail(path, no + "no file identifier " + kProgramIdentifier + " at byte 4 (found " + h.quoted(kIdentifierOffset) +
                   ")");
  }
  if (!h.has(kIdentifierOffset, kProgramIdentifier)) {
    fail(path, "an ExecuTorch program of format " + h.quoted(kIdentifierOffset) + ", this runtime reads " +
                   kProgramIdentifier + ": re-export it with a matching ExecuTorch");
  }
  const uint32_t root = h.u32(0);
  uint64_t program_size = h.file_size;
  if (h.has(kHeaderOffset, "eh00")) {
    if (h.file_size < 16) {
      fail(path, "truncated ExecuTorch program: the file has " + bytes_str(h.file_size) + ", its header more");
    }
    const uint32_t length = h.u32(12);
    if (length < 24 || length > kHeadBytes - kHeaderOffset) {
      fail(path, no + "its extended header has the length " + std::to_string(length));
    }
    if (h.file_size < kHeaderOffset + length) {
      fail(path, "truncated ExecuTorch program: the file has " + bytes_str(h.file_size) + ", its header needs " +
                     std::to_string(kHeaderOffset + length));
    }
    program_size = h.u64(16);
    const uint64_t segment_base = h.u64(24);
    if (program_size > h.file_size) {
      fail(path, "truncated ExecuTorch program: its header counts " + bytes_str(program_size) +
                     " of program, the file has " + bytes_str(h.file_size));
    }
    if (length >= 32) {
      const uint64_t segment_size = h.u64(32);
      if (segment_base > h.file_size || segment_size > h.file_size - segment_base) {
        fail(path, "truncated ExecuTorch program: its data segments end at byte " +
                       std::to_string(segment_base + segment_size) + ", the file has " + bytes_str(h.file_size));
      }
    } else if (segment_base > h.file_size) {
      fail(path, "truncated ExecuTorch program: its data segments start at byte " + std::to_string(segment_base) +
                     ", the file has " + bytes_str(h.file_size));
    }
  }
  if (root < kHeaderOffset || root >= program_size) {
    fail(path, no + "its flatbuffer root offset " + std::to_string(root) + " is outside the program's " +
                   bytes_str(program_size));
  }
}

void check_data_file(const std::string& path) {
  const Head h = read_head(path);
  const std::string no = "not an ExecuTorch data file (.ptd): ";
  if (h.file_size < kHeaderOffset) {
    fail(path, no + "the file has " + bytes_str(h.file_size) + ", fewer than a header");
  }
  if (!h.has(kIdentifierOffset, "FT01")) {
    fail(path, no + "no file identifier FT01 at byte 4 (found " + h.quoted(kIdentifierOffset) + ")");
  }
  if (!h.has(kHeaderOffset, "FH01")) {
    fail(path, no + "no header FH01 at byte 8 (found " + h.quoted(kHeaderOffset) + ")");
  }
  if (h.file_size < kHeaderOffset + 40) {
    fail(path, "truncated ExecuTorch data file: the file has " + bytes_str(h.file_size) + ", its header needs " +
                   std::to_string(kHeaderOffset + 40));
  }
  const uint32_t length = h.u32(12);
  if (length < 40) fail(path, no + "its header has the length " + std::to_string(length));
  const uint64_t fb_offset = h.u64(16), fb_size = h.u64(24), segment_base = h.u64(32), data_size = h.u64(40);
  if (fb_offset > h.file_size || fb_size > h.file_size - fb_offset) {
    fail(path, "truncated ExecuTorch data file: its flatbuffer ends at byte " + std::to_string(fb_offset + fb_size) +
                   ", the file has " + bytes_str(h.file_size));
  }
  if (segment_base > h.file_size || data_size > h.file_size - segment_base) {
    fail(path, "truncated ExecuTorch data file: its data ends at byte " + std::to_string(segment_base + data_size) +
                   ", the file has " + bytes_str(h.file_size));
  }
}

}  // namespace et_cuda_run
