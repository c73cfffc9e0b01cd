#include "backends/cpu/pack16.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tern::cpu {

namespace {

// The first input (within the group) of each unit of a group's activation
// codes: code_offset keeps a unit's 4 inputs 2 apart, from an input that
// begins a 4-bit word's byte pair.
std::array<int, 16> unit_inputs(int64_t G, int64_t g) {
  const int64_t base = unit_base(G, g), stride = unit_stride(G, g);
  std::array<std::array<int, 4>, 16> in{};
  for (int i = 0; i < kGroup; ++i) {
    const int64_t off = code_offset(G, g, i) - base;
    TERN_CHECK(off >= 0 && off % stride < 4 && off / stride < 16);
    in[size_t(off / stride)][size_t(off % stride)] = i;
  }
  std::array<int, 16> first{};
  for (size_t u = 0; u < 16; ++u) {
    first[u] = in[u][0];
    for (int m = 0; m < 4; ++m) TERN_CHECK(in[u][size_t(m)] == first[u] + 2 * m);
    TERN_CHECK(first[u] % 8 < 2);
  }
  return first;
}

// The 4 codes of one row's unit starting at input i0 (inputs i0, i0 + 2, ...)
// of a group's `bits`-bit codes, one a byte.
uint32_t unit_codes(const uint8_t* group_codes, int bits, int i0) {
  uint32_t v = 0;
  if (bits == 8) {
    for (int m = 0; m < 4; ++m) v |= uint32_t(group_codes[i0 + 2 * m]) << (8 * m);
    return v;
  }
  uint32_t word;  // 8 codes, least significant first: i0 % 8 picks the nibble
  std::memcpy(&word, group_codes + i0 / 8 * 4, 4);
  return (word >> (4 * (i0 % 2))) & 0x0F0F0F0Fu;
}

template <class W, class F>
void for_each_packable_slot(W& w, F&& f) {
  f(w.lm_head);
  for (auto& L : w.layers) LayerWeights::for_each_matrix(L, f);
}

}  // namespace

bool packable(const QTensor& w) {
  return !w.packed16 && w.quantized() && (w.bits == 4 || w.bits == 8) && w.group == kGroup &&
         w.dtype == DType::bf16 && w.rows % kPackRows == 0 &&
         int64_t(w.groups_per_row()) <= kMaxPackGroups;
}

void pack16(const QTensor& w, uint8_t* out) {
  TERN_CHECK(packable(w));
  const int64_t G = int64_t(w.groups_per_row()), blocks = w.rows / kPackRows;
  const int64_t rec_bytes = pack_record_bytes(w.bits), codes = pack_code_bytes(w.bits);
  const size_t rb = w.row_bytes(), group_bytes = size_t(kGroup * w.bits / 8);
  std::vector<std::array<int, 16>> first(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) first[size_t(g)] = unit_inputs(G, g);
  const auto* sc = reinterpret_cast<const uint16_t*>(w.scales);
  const auto* bi = reinterpret_cast<const uint16_t*>(w.biases);
  ThreadPool::global().run(size_t(blocks), [&](size_t b, int) {
    uint8_t* rec = out + int64_t(b) * G * rec_bytes;
    for (int64_t g = 0; g < G; ++g, rec += rec_bytes) {
      const std::array<int, 16>& u = first[size_t(g)];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = int64_t(b) * kPackRows + r;
        const uint8_t* src = w.data + size_t(row) * rb + group_bytes * size_t(g);
        for (int j = 0; j < 16; ++j) {
          // 8 bits: vector j is unit j; 4 bits: vector j / 2's nibbles j % 2
          uint32_t v = unit_codes(src, w.bits, u[size_t(j)]);
          uint8_t* lane = rec + 64 * (w.bits == 8 ? j : j / 2) + 4 * r;
          if (w.bits == 4 && j % 2) {
            uint32_t low;
            std::memcpy(&low, lane, 4);
            v = low | v << 4;
          }
          std::memcpy(lane, &v, 4);
        }
        const size_t p = size_t(row * G + g);
        std::memcpy(rec + codes + 2 * r, &sc[p], 2);
        std::memcpy(rec + codes + 32 + 2 * r, &bi[p], 2);
      }
    }
  });
}

size_t pack_weights(ModelWeights& w) {
  // Bytes still read in the plain layout (the embedding, tied or not, and what
  // is not packable) are never given back.
  std::vector<std::span<const uint8_t>> kept;
  auto keep = [&](const QTensor& t) {
    for (std::span<const uint8_t> r : t.storage())
      if (!r.empty()) kept.push_back(r);
  };
  keep(w.embed);
  for_each_packable_slot(w, [&](QTensor& t) {
    if (!packable(t)) keep(t);
  });
  auto in_use = [&](std::span<const uint8_t> r) {
    return std::any_of(kept.begin(), kept.end(), [&](std::span<const uint8_t> k) {
      return r.data() < k.data() + k.size() && k.data() < r.data() + r.size();
    });
  };

  size_t total = 0;
  auto pack_group = [&](const std::vector<QTensor*>& group) {
    size_t bytes = 0;
    for (const QTensor* t : group) bytes += t->bytes();
    if (bytes == 0) return;
    uint8_t* dst = w.repacked.emplace_back(bytes).data();
    std::vector<std::pair<const uint8_t*, const uint8_t*>> sources;  // [begin, end)
    for (QTensor* t : group) {
      pack16(*t, dst);
      for (std::span<const uint8_t> r : t->storage())
        if (!r.empty() && !in_use(r)) sources.emplace_back(r.data(), r.data() + r.size());
      t->data = dst;
      t->scales = t->biases = nullptr;
      t->packed16 = true;
      dst += t->bytes();
    }
    // Given back merged: one madvise a stretch, not one a matrix (each would
    // split the 2 MB pages it ends in; 40 s for the 35b-a3b, not 10).
    std::sort(sources.begin(), sources.end());
    for (size_t i = 0; i < sources.size() && w.store;) {
      const uint8_t *begin = sources[i].first, *end = sources[i].second;
      for (++i; i < sources.size() && sources[i].first <= end; ++i)
        end = std::max(end, sources[i].second);
      w.store->release(begin, size_t(end - begin));
    }
    total += bytes;
  };
  // One buffer a layer (and one for the output head): the experts' thousands
  // of matrices share it.
  std::vector<QTensor*> group;
  if (packable(w.lm_head)) pack_group({&w.lm_head});
  for (LayerWeights& L : w.layers) {
    group.clear();
    LayerWeights::for_each_matrix(L, [&](QTensor& t) {
      if (packable(t)) group.push_back(&t);
    });
    pack_group(group);
  }
  return total;
}

bool has_packed(const ModelWeights& w) {
  bool any = false;
  for_each_packable_slot(w, [&](const QTensor& t) { any = any || t.packed16; });
  return any;
}

}  // namespace tern::cpu
