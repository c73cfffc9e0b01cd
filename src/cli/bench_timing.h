// tern bench's timing over the Backend interface (any backend): prompt
// processing of N random tokens to the last token's logits, and, for the CPU
// backends, greedy decode steps after a context of L random tokens. The CUDA
// backend's decode has its own path (a synthetic context, CUDA events).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tern::cli {

// Comma-separated positive lengths; errors name the flag.
std::vector<int64_t> parse_lengths(const std::string& s, const std::string& flag);
double median(std::vector<double> v);

// Seconds of forward(n random tokens, last logits) into a fresh sequence, per repeat.
std::vector<double> time_prefill(Backend& b, int64_t n, int repeat, uint64_t seed);

// Seconds of `gen` greedy decode steps after `length` random context tokens,
// per repeat. The context is prefilled once, untimed; every repeat starts from
// a fork of that state, so each times positions length + 1 ..
// length + gen. CPU backends only.
std::vector<double> time_cpu_decode(Backend& b, int64_t length, int gen, int repeat, uint64_t seed);

}  // namespace tern::cli
