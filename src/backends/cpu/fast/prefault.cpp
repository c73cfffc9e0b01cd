#include "backends/cpu/fast/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <set>

namespace tern::cpu::fast {

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

void prefault_weights(const ModelWeights& w, WorkPool& pool) {
  if (!w.store) return;
  const std::set<std::string> skipped(w.skipped.begin(), w.skipped.end());
  std::vector<const TensorView*> tensors;
  for (const std::string& name : w.store->names())
    if (!skipped.count(name)) tensors.push_back(&w.store->get(name));
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  pool.run(tensors.size(),
           [&](size_t i, int) { populate(tensors[i]->data, tensors[i]->nbytes, page); });
}

}  // namespace tern::cpu::fast
