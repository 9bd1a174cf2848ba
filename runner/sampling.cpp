#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace et_cuda_run {

double draw(uint64_t seed, uint64_t step) {
  uint64_t z = seed ^ (step * 0xd1b54a32d192ed03ULL);
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    f = man != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    const uint32_t bits = ((exp + 112u) << 23) | (man << 13);
    std::memcpy(&f, &bits, 4);
  }
  return sign != 0 ? -f : f;
}

template <RowType T>
float row_value(const uint8_t* row, size_t v) {
  if constexpr (T == RowType::F32) {
    float f;
    std::memcpy(&f, row + 4 * v, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * v, 2);
    if constexpr (T == RowType::F16) return half_to_float(h);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

// torch.argmax's rule over n values get(0..n-1): the first maximum, the first NaN as the largest.
template <typename Get>
int64_t argmax_by(size_t n, Get get) {
  if (n == 0) return -1;
  size_t best = 0;
  auto best_value = get(0);
  for (size_t v = 1; v < n && !std::isnan(best_value); ++v) {
    const auto x = get(v);
    if (std::isnan(x) || x > best_value) {
      best = v;
      best_value = x;
    }
  }
  return static_cast<int64_t>(best);
}

template <RowType T>
int64_t argmax_typed(const uint8_t* row, size_t n) {
  return argmax_by(n, [row](size_t v) { return row_value<T>(row, v); });
}

}  // namespace

int64_t argmax(const std::vector<double>& logits) {
  return argmax_by(logits.size(), [&logits](size_t v) { return logits[v]; });
}

int64_t argmax_row(const uint8_t* row, size_t n, RowType type) {
  switch (type) {
    case RowType::F32:
      return argmax_typed<RowType::F32>(row, n);
    case RowType::BF16:
      return argmax_typed<RowType::BF16>(row, n);
    case RowType::F16:
      return argmax_typed<RowType::F16>(row, n);
  }
  return -1;
}

std::string check_sampling(const SamplingParams& p) {
  char buf[160];
  const double t = p.temperature;
  if (t != 0 && !(std::isfinite(t) && t >= kMinTemperature && t <= kMaxTemperature)) {
    std::snprintf(buf, sizeof(buf), "temperature %g is outside the rule: 0 (greedy), or finite within [%g, %g]", t,
                  kMinTemperature, kMaxTemperature);
    return buf;
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    std::snprintf(buf, sizeof(buf), "top_p %g is outside (0, 1]", p.top_p);
    return buf;
  }
  return "";
}

SampleAt sample_at(bool row_on_device, bool kernel_dtype, bool device_sampler, bool host_asked, int64_t vocab) {
  if (!row_on_device || !kernel_dtype || !device_sampler || host_asked) return SampleAt::Host;
  return vocab > kMaxDeviceVocab ? SampleAt::HostTooLong : SampleAt::Device;
}

Sampler::Sampler(const SamplingParams& p) : params_(p) {}

namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// Weights are at most 1, so their float bits are at most 0x3F800000: bits 29..0 order them.
constexpr int kBuckets = 1024;

}  // namespace

// The top-p threshold as the device finds it: a radix search on the weights' float
// bits (bits 29..20, 19..10, 9..0), from the largest bucket down, for the weight at
// which the mass of the larger weights stops being below `target`. O(V) per level,
// where sorting the row cost O(V log V) (20 ms a token at V = 151,936).
Sampler::Threshold Sampler::threshold(uint64_t target) {
  uint32_t prefix = 0;
  uint64_t above = 0;  // mass of the weights above the bucket being refined
  int k = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = 20 - 10 * level;
    hist_.assign(kBuckets, 0);
    count_.assign(kBuckets, 0);
    for (size_t v = 0; v < w_.size(); ++v) {
      if (w_[v] == 0) continue;
      const uint32_t bits = bits_of(p_[v]);
      if (level > 0 && (bits >> (shift + 10)) != prefix) continue;
      const uint32_t b = (bits >> shift) & (kBuckets - 1);
      hist_[b] += w_[v];
      ++count_[b];
    }
    k = kBuckets - 1;
    while (k > 0 && above + hist_[k] < target) above += hist_[k--];
    prefix = (prefix << 10) | static_cast<uint32_t>(k);
  }
  Threshold t;
  t.bits = prefix;
  const uint64_t tie = static_cast<uint64_t>(float_of(prefix) * 1099511627776.0f);
  const uint64_t need = above < target && tie > 0 ? (target - above + tie - 1) / tie : 1;
  t.ties = std::min<uint64_t>(std::max<uint64_t>(need, 1), count_[k]);
  return t;
}

int64_t Sampler::pick(const std::vector<double>& logits) {
  if (greedy()) return argmax(logits);
  // Outside the rule 1/T is not a finite float (NaN weights, a NaN cast to an integer).
  if (!check_sampling(params_).empty()) return -1;
  const float inf = std::numeric_limits<float>::infinity();
  const double u = draw(params_.seed, take_step());
  float top = -inf;
  for (double x : logits) {
    if (!std::isnan(x)) top = std::max(top, static_cast<float>(x));
  }
  if (top == -inf) return -1;
  const float inv = static_cast<float>(1.0 / params_.temperature);
  const size_t n = logits.size();
  p_.assign(n, 0.0f);
  w_.assign(n, 0);
  uint64_t total = 0;
  for (size_t v = 0; v < n; ++v) {
    const float x = static_cast<float>(logits[v]);
    if (std::isnan(x) || x == -inf) continue;
    p_[v] = top == inf ? (x == inf ? 1.0f : 0.0f) : std::exp((x - top) * inv);
    w_[v] = static_cast<uint64_t>(p_[v] * 1099511627776.0f);  // 2^40
    total += w_[v];
  }
  // Kept: weights above the threshold, and the first `ties` (by id) equal to it.
  // Without top-p: every weight above 0.
  Threshold t;
  const bool top_p = params_.top_p < 1;
  if (top_p) {
    const uint64_t target =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(params_.top_p * static_cast<double>(total))));
    t = threshold(target);
  }
  auto kept_weight = [&](size_t v, uint64_t& ties_seen) -> uint64_t {
    const uint32_t bits = bits_of(p_[v]);
    if (bits > t.bits) return w_[v];
    if (top_p && bits == t.bits && w_[v] > 0) return ties_seen++ < t.ties ? w_[v] : 0;
    return 0;
  };
  uint64_t sum = 0, ties_seen = 0;
  for (size_t v = 0; v < n; ++v) sum += kept_weight(v, ties_seen);
  if (sum == 0) return argmax(logits);  // the top weight is 2^40: unreachable
  uint64_t target = static_cast<uint64_t>(u * static_cast<double>(sum));
  if (target >= sum) target = sum - 1;
  uint64_t acc = 0;
  ties_seen = 0;
  for (size_t v = 0; v < n; ++v) {
    const uint64_t w = kept_weight(v, ties_seen);
    if (w == 0) continue;
    acc += w;
    if (acc > target) return static_cast<int64_t>(v);
  }
  return argmax(logits);  // unreachable: acc reaches sum > target
}

}  // namespace et_cuda_run
