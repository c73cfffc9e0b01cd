#include "cli/bench_timing.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "backend/sampler.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"
#include "core/rng.h"

namespace tern::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> random_tokens(int64_t n, int vocab, uint64_t seed) {
  CounterRng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng.next_u64() % uint64_t(vocab));
  return t;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<int64_t> parse_lengths(const std::string& s, const std::string& flag) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      const int64_t n = std::stoll(item);
      if (n <= 0) throw std::invalid_argument("");
      v.push_back(n);
    } catch (const std::exception&) {
      fail("{}: '{}' is not a positive context length", flag, item);
    }
  }
  if (v.empty()) fail("{} needs at least one context length", flag);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<double> time_prefill(Backend& b, int64_t n, int repeat, uint64_t seed) {
  const std::vector<int32_t> tokens = random_tokens(n, b.config().vocab, seed);
  std::vector<float> logits;
  std::vector<double> secs;
  for (int r = 0; r < repeat; ++r) {
    auto seq = b.new_sequence();
    const auto t0 = Clock::now();
    b.forward(*seq, tokens, Logits::last, logits);
    secs.push_back(seconds_since(t0));
  }
  return secs;
}

std::vector<double> time_cpu_decode(Backend& b, int64_t length, int gen, int repeat,
                                    uint64_t seed) {
  auto filled = b.new_sequence();
  if (!dynamic_cast<ReferenceSequence*>(filled.get()))
    fail("tern bench: decode timing over a prefilled context is for the CPU backends");
  std::vector<float> logits;
  b.forward(*filled, random_tokens(length, b.config().vocab, seed), Logits::last, logits);
  const int32_t first = argmax(logits);
  const auto state = b.save(*filled);
  std::vector<double> secs;
  for (int r = 0; r < repeat; ++r) {
    auto fresh = b.fork(*filled, *state);  // the context's state, fresh for every repeat
    auto& seq = dynamic_cast<ReferenceSequence&>(*fresh);
    const ModelConfig& c = b.config();
    const size_t more = size_t(gen) * size_t(c.n_kv_heads) * size_t(c.head_dim);
    for (size_t i = 0; i < seq.kv.size(); ++i)  // room for the steps: no reallocation timed
      if (c.layer_types[i] == LayerType::full_attention) {
        seq.kv[i].k.reserve(seq.kv[i].k.size() + more);
        seq.kv[i].v.reserve(seq.kv[i].v.size() + more);
      }
    int32_t token = first;
    const auto t0 = Clock::now();
    for (int i = 0; i < gen; ++i) {
      b.forward(seq, std::span(&token, 1), Logits::last, logits);
      token = argmax(logits);
    }
    secs.push_back(seconds_since(t0));
  }
  return secs;
}

}  // namespace tern::cli
