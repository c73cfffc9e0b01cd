// Maps every page of a checkpoint's tensors into the process before the first
// forward pass (madvise MADV_POPULATE_READ; a read of one byte a page where the
// kernel lacks it). Unmapped, the first touch of each page of each expert is a
// page fault in the middle of a decode step: ~10% of the time of the first
// hundred tokens. llama.cpp populates its mapping the same way (MAP_POPULATE).
// Pages not yet in the page cache are read from disk here instead of then.
#pragma once

#include "checkpoint/weights.h"
#include "core/thread_pool.h"

namespace tern::cpu {

void prefault_weights(const ModelWeights& w, ThreadPool& pool);

}  // namespace tern::cpu
