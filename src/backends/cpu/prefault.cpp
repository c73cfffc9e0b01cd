#include "backends/cpu/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace tern::cpu {

namespace {

void populate(const uint8_t* data, size_t bytes, size_t page) {
  const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(data) + bytes;
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return;
#endif
  volatile uint8_t sink = 0;
  for (uintptr_t p = std::max(begin, reinterpret_cast<uintptr_t>(data)); p < end; p += page)
    sink = sink + *reinterpret_cast<const uint8_t*>(p);
}

}  // namespace

void prefault_weights(const ModelWeights& w, ThreadPool& pool) {
  if (!w.store || w.store->residency() == Residency::huge_pages) return;  // read in already
  // The matrices' byte ranges as they are read now (repacked ones were written
  // in memory, the rest are views into the files).
  std::vector<std::span<const uint8_t>> ranges;
  auto add = [&](const QTensor& t) {
    if (t.packed16) return;
    for (std::span<const uint8_t> r : t.storage())
      if (!r.empty()) ranges.push_back(r);
  };
  add(w.embed);
  add(w.lm_head);
  for (const LayerWeights& L : w.layers) LayerWeights::for_each_matrix(L, add);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  pool.run(ranges.size(),
           [&](size_t i, int) { populate(ranges[i].data(), ranges[i].size(), page); });
}

}  // namespace tern::cpu
