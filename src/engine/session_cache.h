// The session cache: recent conversations' sequences (KV cache, recurrent and
// conv state) and snapshots of their state, so that a request re-sending a
// conversation prefills only what is new. The KV cache is kept token-exact
// (no blocks: a prefix of any length is reusable); snapshots are taken at the
// prefill plan's stops (prefill_plan.h) and restored only at the new request's
// own stops, so reuse is exact. Memory (sequences as allocated plus
// snapshots) stays within a budget by evicting the least recently used
// snapshot or session; using one refreshes only it. With a disk tier
// (disk_cache.h) every snapshot is also written there as it is taken, and a
// prompt whose longest usable prefix is on disk, not in memory, loads it.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/disk_cache.h"
#include "engine/prefill_plan.h"

namespace tern {

struct Snapshot {
  std::shared_ptr<const SequenceState> state;  // shared with the disk cache's writer
  uint64_t used = 0;                           // LRU stamp
};

// One conversation's state, leased to a request or kept in the cache.
struct Session {
  std::unique_ptr<Sequence> seq;
  std::vector<int32_t> tokens;                             // the token at each position of seq
  std::map<int64_t, std::shared_ptr<Snapshot>> snapshots;  // by length (prefilled positions)
  int64_t generation_start = 0;  // its last request's generation prompt began here
  int64_t matched = 0;           // acquire: the prompt's longest common prefix with the cache
  int64_t loaded = 0;            // acquire: the prefix loaded from disk (0: none)
  std::set<int64_t> on_disk;     // its KV pieces' ends stored on disk (DiskCache::store)
  uint64_t used = 0;             // LRU stamp
};

class SessionCache {
 public:
  // budget 0: nothing is kept in memory (no reuse but the disk's, if any).
  SessionCache(Backend& be, size_t budget, DiskCache* disk = nullptr);

  // A session for `prompt` (prefill plan `plan`): the cached one restored
  // from the latest snapshot at one of the plan's stops within the prompt's
  // longest common prefix with it (in place when the rest of it is only its
  // last completion, else forked, leaving it cached), or loaded from disk
  // where that reaches further, or a new one. The session's tokens are then
  // the prompt's first tokens.size() tokens.
  Session acquire(std::span<const int32_t> prompt, const PrefillPlan& plan);
  // Keeps the state of `active` at its current length as a snapshot, when
  // the budget can hold it beside the cache (evicting what it must); with a
  // disk tier, also stores it there.
  bool snapshot(Session& active);
  // Evicts until `bytes` more fit beside the cache and `active`; false when
  // the budget cannot hold them.
  bool make_room(const Session& active, size_t bytes);
  // Keeps a session for later requests (or drops it without a budget).
  void release(Session s);

  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  size_t budget() const { return budget_; }
  size_t sessions() const { return sessions_.size(); }
  // The memory of one session: its sequence and snapshots.
  size_t session_bytes(const Session& s) const;

 private:
  size_t total(const Session* extra) const;  // cached sessions (+ extra), snapshots once
  // Drops the least recently used item that `keep` does not also hold.
  bool evict_one(const Session* keep);
  void update_bytes();

  Backend& be_;
  size_t budget_;
  DiskCache* disk_;
  std::list<Session> sessions_;
  uint64_t clock_ = 0;
  std::atomic<size_t> bytes_{0};
};

}  // namespace tern
