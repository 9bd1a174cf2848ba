// --json: the runner's results as JSON lines (one object per line, "kind" first), for tools
// that read them (tests/models/runner_json.py) instead of the text lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace et_cuda_run {

// Whether results are printed as JSON lines (set once from the command line).
void set_json(bool on);
bool json();

// One JSON object on one line. Strings are escaped (quotes, backslashes, control characters
// as \uXXXX; bytes of 0x80 and up pass as they are), non-finite numbers become null.
class JsonLine {
 public:
  explicit JsonLine(const std::string& kind);
  JsonLine& str(const std::string& key, const std::string& value);
  JsonLine& num(const std::string& key, double value);
  JsonLine& integer(const std::string& key, long long value);
  JsonLine& boolean(const std::string& key, bool value);
  JsonLine& null(const std::string& key);
  JsonLine& ints(const std::string& key, const std::vector<int64_t>& values);
  // The object, without a newline.
  std::string text() const;
  // The object and a newline, on `f`.
  void print(std::FILE* f) const;

 private:
  JsonLine& key(const std::string& k);
  std::string s_;
};

// `text` as a JSON string literal (with its quotes).
std::string json_string(const std::string& text);

}  // namespace et_cuda_run
