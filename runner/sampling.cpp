#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace et_cuda_run {

namespace {
uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}
}  // namespace

uint64_t Rng::splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
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

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}

int64_t Sampler::pick(const std::vector<double>& logits) {
  if (greedy()) return argmax(logits);
  const double inf = std::numeric_limits<double>::infinity();
  double top = -inf;
  for (double x : logits) {
    if (!std::isnan(x)) top = std::max(top, x);
  }
  if (top == -inf) return -1;
  // Probabilities up to a common factor; +inf logits share all the mass.
  p_.assign(logits.size(), 0.0);
  for (size_t v = 0; v < logits.size(); ++v) {
    const double x = logits[v];
    if (std::isnan(x) || x == -inf) continue;
    p_[v] = top == inf ? (x == inf ? 1.0 : 0.0) : std::exp((x - top) / params_.temperature);
  }
  order_.clear();
  for (size_t v = 0; v < p_.size(); ++v) {
    if (p_[v] > 0) order_.push_back(static_cast<uint32_t>(v));
  }
  if (order_.empty()) return argmax(logits);  // every weight underflowed but the top one cannot: unreachable
  double mass = 0;
  for (uint32_t v : order_) mass += p_[v];
  if (params_.top_p < 1) {
    std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) { return p_[a] > p_[b]; });
    double kept = 0;
    size_t n = 0;
    while (n < order_.size() && kept < params_.top_p * mass) kept += p_[order_[n++]];
    order_.resize(std::max<size_t>(n, 1));
    mass = kept > 0 ? kept : p_[order_[0]];
  }
  double u = rng_.uniform() * mass;
  for (uint32_t v : order_) {
    if (u < p_[v]) return v;
    u -= p_[v];
  }
  return order_.back();  // rounding left u just above the last weight
}

}  // namespace et_cuda_run
