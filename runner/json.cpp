#include "json.h"

#include <cmath>

namespace et_cuda_run {

namespace {
bool g_json = false;
}  // namespace

void set_json(bool on) { g_json = on; }
bool json() { return g_json; }

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

JsonLine::JsonLine(const std::string& kind) : s_("{\"kind\":" + json_string(kind)) {}

JsonLine& JsonLine::key(const std::string& k) {
  s_ += "," + json_string(k) + ":";
  return *this;
}

JsonLine& JsonLine::str(const std::string& k, const std::string& v) {
  key(k).s_ += json_string(v);
  return *this;
}

JsonLine& JsonLine::num(const std::string& k, double v) {
  if (!std::isfinite(v)) return null(k);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  key(k).s_ += buf;
  return *this;
}

JsonLine& JsonLine::integer(const std::string& k, long long v) {
  key(k).s_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::boolean(const std::string& k, bool v) {
  key(k).s_ += v ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::null(const std::string& k) {
  key(k).s_ += "null";
  return *this;
}

JsonLine& JsonLine::ints(const std::string& k, const std::vector<int64_t>& values) {
  key(k).s_ += "[";
  for (size_t i = 0; i < values.size(); ++i) s_ += (i ? "," : "") + std::to_string(values[i]);
  s_ += "]";
  return *this;
}

std::string JsonLine::text() const { return s_ + "}"; }

void JsonLine::print(std::FILE* f) const { std::fprintf(f, "%s\n", text().c_str()); }

}  // namespace et_cuda_run
