#include "tokenizer/bpe.h"

#include <algorithm>

#include "core/error.h"

namespace tern {
namespace {

constexpr size_t kMaxCachedPiece = 64;  // bytes
constexpr size_t kReusedPieceBytes = 4096;
constexpr size_t kMaxCacheEntries = 1 << 16;

}  // namespace

Bpe::Bpe(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (it == vocab_.end()) fail("byte-level BPE vocabulary has no token for byte 0x{:02x}", b);
    byte_id_[b] = it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
      fail("BPE merge #{} uses a token that is not in the vocabulary", rank);
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face.
    merges_.try_emplace(key(ia->second, ib->second), Merge{int32_t(rank), iab->second});
  }
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedPiece) return merge(piece, out);
  {
    std::lock_guard lock(cache_mu_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t first = out.size();
  merge(piece, out);
  std::vector<int32_t> ids(out.begin() + ptrdiff_t(first), out.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.try_emplace(std::string(piece), std::move(ids));
}

void Bpe::merge(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list; candidate merges wait in a min-heap ordered by
  // (rank, position). A candidate is stale once either symbol has changed.
  struct Sym {
    int32_t id, prev, next;
  };
  struct Cand {
    int32_t rank, pos, left, right, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  struct Scratch {
    std::vector<Sym> sym;
    std::vector<Cand> heap;
  };
  // Reused across calls, up to pieces of kReusedPieceBytes: one long word
  // (~50 bytes per byte) must not stay held by every thread that met one.
  thread_local Scratch reused;
  Scratch fresh;
  Scratch& scratch = piece.size() <= kReusedPieceBytes ? reused : fresh;
  auto& sym = scratch.sym;
  auto& heap = scratch.heap;
  const auto n = int32_t(piece.size());
  sym.resize(size_t(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    sym[size_t(i)] = {byte_id_[uint8_t(piece[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1};
  auto push = [&](int32_t pos) {
    int32_t right = sym[size_t(pos)].next;
    if (right < 0) return;
    int32_t l = sym[size_t(pos)].id, r = sym[size_t(right)].id;
    auto it = merges_.find(key(l, r));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, l, r, it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    Cand c = heap.back();
    heap.pop_back();
    Sym& s = sym[size_t(c.pos)];
    if (s.id != c.left || s.next < 0 || sym[size_t(s.next)].id != c.right) continue;
    Sym& r = sym[size_t(s.next)];
    s.id = c.id;
    s.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = c.pos;
    r.id = -1;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace tern
