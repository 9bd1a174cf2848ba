#include "sampling.h"

#include <algorithm>
#include <cmath>
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

int64_t argmax(const std::vector<double>& logits) {
  if (logits.empty()) return -1;
  size_t best = 0;
  double best_value = logits[0];
  for (size_t v = 1; v < logits.size() && !std::isnan(best_value); ++v) {
    if (std::isnan(logits[v]) || logits[v] > best_value) {
      best = v;
      best_value = logits[v];
    }
  }
  return static_cast<int64_t>(best);
}

Sampler::Sampler(const SamplingParams& p) : params_(p) {}

int64_t Sampler::pick(const std::vector<double>& logits) {
  if (greedy()) return argmax(logits);
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
  kept_.assign(n, false);
  uint64_t total = 0;
  for (size_t v = 0; v < n; ++v) {
    const float x = static_cast<float>(logits[v]);
    if (std::isnan(x) || x == -inf) continue;
    p_[v] = top == inf ? (x == inf ? 1.0f : 0.0f) : std::exp((x - top) * inv);
    w_[v] = static_cast<uint64_t>(p_[v] * 1099511627776.0f);  // 2^40
    kept_[v] = p_[v] > 0;
    total += w_[v];
  }
  if (params_.top_p < 1) {
    // Most likely first, ties by lower id, until the kept mass reaches top_p of the total.
    order_.clear();
    for (size_t v = 0; v < n; ++v) {
      if (w_[v] > 0) order_.push_back(static_cast<uint32_t>(v));
    }
    std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) { return p_[a] > p_[b] || (p_[a] == p_[b] && a < b); });
    const uint64_t target = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(params_.top_p * static_cast<double>(total))));
    kept_.assign(n, false);
    uint64_t acc = 0;
    for (uint32_t v : order_) {
      if (acc >= target) break;
      acc += w_[v];
      kept_[v] = true;
    }
  }
  uint64_t sum = 0;
  for (size_t v = 0; v < n; ++v) {
    if (kept_[v]) sum += w_[v];
  }
  if (sum == 0) return argmax(logits);  // the top weight is 2^40: unreachable
  uint64_t target = static_cast<uint64_t>(u * static_cast<double>(sum));
  if (target >= sum) target = sum - 1;
  uint64_t acc = 0;
  for (size_t v = 0; v < n; ++v) {
    if (!kept_[v] || w_[v] == 0) continue;
    acc += w_[v];
    if (acc > target) return static_cast<int64_t>(v);
  }
  return argmax(logits);  // unreachable: acc reaches sum > target
}

}  // namespace et_cuda_run
