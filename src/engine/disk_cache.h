// The session cache's disk tier (docs/serving.md, "Disk cache"). Every
// snapshot the engine takes is also written to a directory as two files
// (cache_file.h): its state, and a KV piece, the rows since the session's
// previous piece, naming that piece as its parent; a conversation's KV is so
// written once, however many snapshots it has. Both are named by the hash of
// the tokens they follow. A prompt whose longest usable prefix (at one of its
// own plan stops, as in memory) is on disk loads it: the pieces from position
// 0, then the state, bit for bit what was saved.
//
// Entries are bound to a binding text (the model, the backend's numerics, the
// prefill plan, the build): others in the directory are removed at start, as
// are damaged ones (found at start by their header, at load by their hash).
// One writer thread takes snapshots from a bounded queue (what does not fit is
// dropped and counted: the engine never waits for the disk); the files stay
// within a byte budget, least recently used first; a failed write (a full
// disk) turns writing off with one warning. One process uses a directory at a
// time (a lock file).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/cache_file.h"
#include "engine/prefill_plan.h"

namespace tern {

struct DiskCacheOptions {
  std::string dir;
  size_t budget = 0;    // bytes of files at most
  std::string binding;  // what entries are bound to (Engine: model, numerics, plan, build)
  size_t queue_bytes = size_t(1) << 30;  // snapshots waiting to be written, at most
};

struct DiskCacheStats {
  uint64_t hits = 0, misses = 0;  // requests that loaded a prefix / found none longer than memory's
  uint64_t loaded_bytes = 0, written_bytes = 0, writes = 0;  // writes: files
  uint64_t dropped = 0;  // snapshots not written: the queue full, a parent gone, writing off
  uint64_t removed = 0;  // damaged or foreign entries removed
  double load_seconds = 0, write_seconds = 0;
  uint64_t bytes = 0, entries = 0;  // on disk now
  uint64_t queued = 0;              // snapshots waiting for the writer or being written
  bool writing = true;              // false after a failed write
};

// The platform's default for `tern chat` and `tern cache`:
// $XDG_CACHE_HOME/tern/sessions, else ~/.cache/tern/sessions.
std::string default_cache_dir();

// Another process holds the directory.
class CacheDirBusy : public Error {
 public:
  using Error::Error;
};

// The directory's lock (the file kLockName in it), held while the object lives;
// throws CacheDirBusy when another process holds it.
class CacheDirLock {
 public:
  explicit CacheDirLock(const std::string& dir);
  ~CacheDirLock();
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;

 private:
  int fd_ = -1;
};

class DiskCache {
 public:
  // Creates the directory (0700) or indexes what it holds. Throws tern::Error
  // when it cannot be used (not creatable; CacheDirBusy: held by another process).
  DiskCache(Backend& be, DiskCacheOptions o);
  ~DiskCache();  // writes what is queued first
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  struct Loaded {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<const SequenceState> state;  // seq's state, at its length
    std::vector<int64_t> ends;                   // its KV pieces' ends, ascending
  };
  // The longest prefix of `prompt` longer than `beyond`, at one of the plan's
  // stops, with its state and KV on disk, loaded; nullopt when there is none,
  // or when it proves damaged: then it (and what needs it) is removed, with
  // a warning, and the request prefills.
  std::optional<Loaded> load(std::span<const int32_t> prompt, const PrefillPlan& plan,
                             int64_t beyond);
  // Queues the state saved after `tokens` (seq holding at least as many) and
  // seq's KV rows since the last of `pieces` (the ends of the session's
  // pieces stored before) still on disk or queued, or since 0; forgets the
  // ends after it (gone: evicted, damaged, dropped) and, when queued (or on
  // disk already), adds tokens.size().
  void store(std::span<const int32_t> tokens, Sequence& seq,
             std::shared_ptr<const SequenceState> state, std::set<int64_t>& pieces);
  // Waits until the queue is written.
  void flush() const;
  DiskCacheStats stats() const;
  const std::string& dir() const { return o_.dir; }

 private:
  struct Entry {
    EntryKind kind;
    uint64_t key, parent;
    int64_t start, end;
    uint64_t bytes, used;
  };
  struct Item {  // one snapshot for the writer
    uint64_t key, parent;
    int64_t from;
    std::vector<int32_t> tokens;  // [0, end)
    std::optional<std::vector<std::byte>> kv;
    std::shared_ptr<const SequenceState> state;  // null: on disk already
    size_t bytes;
  };
  using Map = std::unordered_map<uint64_t, Entry>;

  void index();
  void writer();
  void write(Item& it);
  Entry commit(EntryWriter& w, const EntryHeader& h);
  std::string path(EntryKind kind, uint64_t key) const;
  // Removes an entry and what needs it (a piece's state and later pieces);
  // returns the files to unlink (outside the lock).
  void drop(EntryKind kind, uint64_t key, std::vector<std::string>& files);
  void evict(std::vector<std::string>& files);  // to the budget, least recently used first
  void touch(const Entry& e);
  void add(const Entry& e);
  Map& map(EntryKind kind) { return kind == EntryKind::kv ? kv_ : state_; }
  std::optional<Loaded> read(std::span<const int32_t> prompt, int64_t length, uint64_t key);
  // KV buffers the writer is done with, reused by store() (under m_): their
  // pages are mapped already, and a fault per 4 KB of a fresh one was most of
  // what a store cost the engine thread.
  std::vector<std::byte> take_spare();
  void keep_spare(std::vector<std::byte>&& v);
  static constexpr size_t kSpareBytes = size_t(256) << 20;

  Backend& be_;
  DiskCacheOptions o_;
  uint64_t binding_;
  std::unique_ptr<CacheDirLock> lock_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  mutable std::condition_variable done_;
  Map kv_, state_;
  std::unordered_set<uint64_t> pending_kv_, pending_state_;
  std::deque<Item> queue_;
  bool busy_ = false, stop_ = false, writing_ = true, warned_drop_ = false;
  uint64_t clock_ = 0, total_ = 0;
  size_t queued_bytes_ = 0;
  std::vector<std::vector<std::byte>> spare_;
  size_t spare_bytes_ = 0;
  DiskCacheStats stats_;
  std::thread thread_;
};

}  // namespace tern
