#include "backends/cpu/fast/pack16.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <utility>

#include "backends/cpu/fast/work_pool.h"
#include "core/error.h"

namespace tern::cpu::fast {

namespace {

// Where unit u of a group's activation codes comes from in a row's packed
// bytes: its 4 inputs are one nibble (`shift` 0 or 4) of the 4 bytes of 32-bit
// word `word` of the group (code_offset keeps each unit's inputs 2 apart).
struct UnitSource {
  int word, shift;
};

std::array<UnitSource, 16> unit_sources(int64_t G, int64_t g) {
  std::array<UnitSource, 16> src{};
  const int64_t base = unit_base(G, g), stride = unit_stride(G, g);
  std::array<std::array<int, 4>, 16> in{};
  for (int i = 0; i < kGroup; ++i) {
    const int64_t off = code_offset(G, g, i) - base;
    TERN_CHECK(off >= 0 && off % stride < 4 && off / stride < 16);
    in[size_t(off / stride)][size_t(off % stride)] = i;
  }
  for (size_t u = 0; u < 16; ++u) {
    const int i0 = in[u][0];
    for (int m = 0; m < 4; ++m) TERN_CHECK(in[u][size_t(m)] == i0 + 2 * m);
    TERN_CHECK(i0 % 8 < 2);  // the unit starts a word
    src[u] = {i0 / 8, 4 * (i0 % 2)};
  }
  return src;
}

template <class W, class F>
void for_each_packable_slot(W& w, F&& f) {
  f(w.lm_head);
  for (auto& L : w.layers) LayerWeights::for_each_matrix(L, f);
}

}  // namespace

bool packable(const QTensor& w) {
  return !w.packed16 && is_q4(w) && w.dtype == DType::bf16 && w.rows % kPackRows == 0 &&
         int64_t(w.groups_per_row()) <= kMaxPackGroups;
}

void pack16(const QTensor& w, uint8_t* out) {
  TERN_CHECK(packable(w));
  const int64_t G = int64_t(w.groups_per_row()), blocks = w.rows / kPackRows;
  const size_t rb = w.row_bytes();
  std::vector<std::array<UnitSource, 16>> src(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) src[size_t(g)] = unit_sources(G, g);
  const auto* sc = reinterpret_cast<const uint16_t*>(w.scales);
  const auto* bi = reinterpret_cast<const uint16_t*>(w.biases);
  WorkPool::global().run(size_t(blocks), [&](size_t b, int) {
    uint8_t* rec = out + int64_t(b) * G * kPackRecord;
    for (int64_t g = 0; g < G; ++g, rec += kPackRecord) {
      const std::array<UnitSource, 16>& u = src[size_t(g)];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = int64_t(b) * kPackRows + r;
        uint32_t word[8];
        std::memcpy(word, w.data + size_t(row) * rb + 32 * size_t(g), 32);
        auto nibbles = [&](const UnitSource& s) { return (word[s.word] >> s.shift) & 0x0F0F0F0Fu; };
        for (int j = 0; j < 8; ++j) {
          const uint32_t v = nibbles(u[size_t(2 * j)]) | nibbles(u[size_t(2 * j + 1)]) << 4;
          std::memcpy(rec + 64 * j + 4 * r, &v, 4);
        }
        const size_t p = size_t(row * G + g);
        std::memcpy(rec + 512 + 2 * r, &sc[p], 2);
        std::memcpy(rec + 544 + 2 * r, &bi[p], 2);
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

}  // namespace tern::cpu::fast
