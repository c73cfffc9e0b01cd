// This machine's memory bandwidth, measured with the fast backend's threads
// over buffers far larger than the last-level cache: the denominator of
// tern bench's "fraction of the floor" on the CPU.
#pragma once

#include "core/thread_pool.h"

namespace tern::cpu {

struct MemoryBandwidth {
  double copy = 0;  // memcpy, bytes read + bytes written per second
  double read = 0;  // a sum over the buffer, bytes read per second
};

// Best of five rounds after a warm-up, each thread on its own slice of two
// 128 MiB buffers (8x the 32 MiB L3 of the machine this was tuned on).
MemoryBandwidth measure_memory_bandwidth(ThreadPool& pool);

}  // namespace tern::cpu
