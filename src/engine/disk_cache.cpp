#include "engine/disk_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tern {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The directory, made private to the user where it is new; one that exists
// keeps its mode, with a warning when others may read it.
void make_private_dir(const std::string& dir) {
  const fs::path p(dir);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    fail("cannot create the cache directory {}: {}", dir, std::strerror(errno));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("the cache directory {} is not a directory", dir);
  if (st.st_uid != ::geteuid())
    spdlog::warn("the cache directory {} belongs to another user", dir);
  else if ((st.st_mode & 077) != 0)
    spdlog::warn(
        "the cache directory {} is open to other users (mode {:o}); it holds conversations' "
        "token ids: chmod 700 it",
        dir, st.st_mode & 0777);
}

std::vector<int32_t> read_ids(EntryReader& r, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  r.read(std::as_writable_bytes(std::span(ids)));
  return ids;
}

}  // namespace

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/tern/sessions";
  const char* home = std::getenv("HOME");
  if (!home || !*home) fail("no HOME to put the cache in: give --cache-dir");
  return std::string(home) + "/.cache/tern/sessions";
}

CacheDirLock::CacheDirLock(const std::string& dir) {
  const std::string path = dir + "/" + kLockName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    throw CacheDirBusy(
        fmt::format("the cache directory {} is in use by another tern process", dir));
  }
}

CacheDirLock::~CacheDirLock() {
  ::close(fd_);  // releases the lock
}

DiskCache::DiskCache(Backend& be, DiskCacheOptions o)
    : be_(be), o_(std::move(o)), binding_(hash64(o_.binding.data(), o_.binding.size())) {
  make_private_dir(o_.dir);
  lock_ = std::make_unique<CacheDirLock>(o_.dir);
  index();
  thread_ = std::thread([this] { writer(); });
}

DiskCache::~DiskCache() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string DiskCache::path(EntryKind kind, uint64_t key) const {
  return o_.dir + "/" + entry_name(kind, key);
}

void DiskCache::index() {
  struct Found {
    Entry e;
    int64_t mtime;
  };
  std::vector<Found> found;
  uint64_t bad = 0;
  std::string first;
  for (const auto& d : fs::directory_iterator(o_.dir)) {
    const std::string name = d.path().filename().string(), file = d.path().string();
    if (name.starts_with(kTempPrefix)) {  // a write cut short
      ::unlink(file.c_str());
      continue;
    }
    const auto n = parse_entry_name(name);
    if (!n) continue;  // not the cache's
    try {
      EntryReader r(file);
      const EntryHeader& h = r.header();
      if (h.binding != binding_ || h.binding_text != o_.binding)
        fail("{}: made for another model, backend or build ({})", file, h.binding_text);
      if (h.kind != n->kind || h.key != n->key) fail("{}: its header names another entry", file);
      const size_t want =
          h.kind == EntryKind::kv ? be_.kv_bytes(h.start, h.end) : be_.state_bytes();
      if (h.payload_bytes != want || (h.start == 0 && h.parent != 0))
        fail("{}: damaged header", file);
      struct stat st {};
      ::stat(file.c_str(), &st);
      found.push_back({{h.kind, h.key, h.parent, h.start, h.end, h.file_bytes(), 0},
                       int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
    } catch (const Error& e) {
      ::unlink(file.c_str());
      if (bad++ == 0) first = e.what();
    }
  }
  // The least recently used first; what a load touched together, the deepest first.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.e.end > b.e.end;
  });
  for (Found& f : found) {
    f.e.used = ++clock_;
    add(f.e);
  }
  // Pieces whose parent is gone and states without their KV cannot be used.
  std::vector<std::string> files;
  for (bool again = true; again;) {
    again = false;
    for (const auto& [key, e] : kv_)
      if (e.start > 0 && !kv_.contains(e.parent)) {
        drop(EntryKind::kv, key, files);
        again = true;
        break;
      }
  }
  std::vector<uint64_t> orphans;
  for (const auto& [key, e] : state_)
    if (!kv_.contains(key)) orphans.push_back(key);
  for (uint64_t key : orphans) drop(EntryKind::state, key, files);
  evict(files);
  for (const std::string& f : files) ::unlink(f.c_str());
  stats_.removed = bad;
  if (bad > 0)
    spdlog::warn("disk cache: removed {} damaged or foreign entries from {} (the first: {})", bad,
                 o_.dir, first);
  if (!files.empty())
    spdlog::info(
        "disk cache: removed {} entries whose earlier pieces are gone or over --cache-disk",
        files.size());
  spdlog::info("disk cache: {} entries, {:.1f} MB in {}", kv_.size() + state_.size(),
               double(total_) / 1e6, o_.dir);
}

void DiskCache::add(const Entry& e) {
  map(e.kind)[e.key] = e;
  total_ += e.bytes;
}

void DiskCache::drop(EntryKind kind, uint64_t key, std::vector<std::string>& files) {
  Map& m = map(kind);
  const auto it = m.find(key);
  if (it == m.end()) return;
  total_ -= it->second.bytes;
  m.erase(it);
  files.push_back(path(kind, key));
  if (kind == EntryKind::state) return;
  drop(EntryKind::state, key, files);
  std::vector<uint64_t> children;
  for (const auto& [k, e] : kv_)
    if (e.start > 0 && e.parent == key) children.push_back(k);
  for (uint64_t k : children) drop(EntryKind::kv, k, files);
}

void DiskCache::evict(std::vector<std::string>& files) {
  while (total_ > o_.budget) {
    // Oldest first; at equal age (a chain touched together) the deepest, a
    // state before its piece: what others need goes last.
    const Entry* victim = nullptr;
    auto older = [](const Entry& a, const Entry& b) {
      if (a.used != b.used) return a.used < b.used;
      if (a.end != b.end) return a.end > b.end;
      return a.kind == EntryKind::state && b.kind == EntryKind::kv;
    };
    for (const Map* m : {&kv_, &state_})
      for (const auto& [key, e] : *m)
        if (!victim || older(e, *victim)) victim = &e;
    if (!victim) return;
    drop(victim->kind, victim->key, files);
  }
}

void DiskCache::touch(const Entry& e) {
  map(e.kind)[e.key].used = clock_;
}

void DiskCache::store(std::span<const int32_t> tokens, Sequence& seq,
                      std::shared_ptr<const SequenceState> state, std::set<int64_t>& pieces) {
  const int64_t end = int64_t(tokens.size());
  TERN_CHECK(end <= seq.length() && (pieces.empty() || *pieces.rbegin() <= end));
  // The keys of the earlier pieces' ends, then of this prefix.
  std::vector<std::pair<int64_t, uint64_t>> ends;
  PrefixHash h(binding_);
  int64_t at = 0;
  for (int64_t b : pieces) {
    h.add(tokens.subspan(size_t(at), size_t(b - at)));
    ends.emplace_back(at = b, h.key());
  }
  h.add(tokens.subspan(size_t(at)));
  const uint64_t key = h.key();
  std::unique_lock lock(m_);
  auto present = [&](uint64_t k) { return kv_.contains(k) || pending_kv_.contains(k); };
  while (!ends.empty() && !present(ends.back().second)) {
    pieces.erase(ends.back().first);
    ends.pop_back();
  }
  const int64_t from = ends.empty() ? 0 : ends.back().first;
  const uint64_t parent = ends.empty() ? 0 : ends.back().second;
  const bool has_kv = present(key);
  const bool has_state = state_.contains(key) || pending_state_.contains(key);
  if (has_kv) pieces.insert(end);
  if ((has_kv && has_state) || !writing_) return;
  const size_t kv = has_kv ? 0 : be_.kv_bytes(from, end);
  const size_t bytes = kv + (has_state ? 0 : be_.state_bytes()) + tokens.size_bytes();
  if (bytes > o_.budget) return;  // would be evicted as soon as written
  if (!queue_.empty() && queued_bytes_ + bytes > o_.queue_bytes) {
    stats_.dropped++;
    if (!std::exchange(warned_drop_, true))
      spdlog::warn(
          "disk cache: the writer is behind; snapshots that do not fit its queue are not written "
          "(tern_disk_cache_dropped_total counts them)");
    return;
  }
  Item it{key, parent, from, {tokens.begin(), tokens.end()}, {}, nullptr, bytes};
  if (!has_kv) {
    it.kv.emplace(take_spare());
    lock.unlock();  // the copy of the KV rows is the engine thread's only cost
    it.kv->reserve(kv);
    be_.export_kv(seq, from, end, [&](std::span<const std::byte> b) {
      it.kv->insert(it.kv->end(), b.begin(), b.end());
    });
    lock.lock();
    pending_kv_.insert(key);
    pieces.insert(end);
  }
  if (!has_state) {
    it.state = std::move(state);
    pending_state_.insert(key);
  }
  queued_bytes_ += bytes;
  queue_.push_back(std::move(it));
  lock.unlock();
  cv_.notify_all();
}

std::vector<std::byte> DiskCache::take_spare() {
  if (spare_.empty()) return {};
  auto largest = std::max_element(spare_.begin(), spare_.end(), [](const auto& a, const auto& b) {
    return a.capacity() < b.capacity();
  });
  std::vector<std::byte> v = std::move(*largest);
  spare_.erase(largest);
  spare_bytes_ -= v.capacity();
  v.clear();
  return v;
}

void DiskCache::keep_spare(std::vector<std::byte>&& v) {
  if (spare_bytes_ + v.capacity() > kSpareBytes) return;
  spare_bytes_ += v.capacity();
  spare_.push_back(std::move(v));
}

void DiskCache::flush() const {
  std::unique_lock lock(m_);
  done_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard lock(m_);
  DiskCacheStats s = stats_;
  s.bytes = total_;
  s.entries = kv_.size() + state_.size();
  s.writing = writing_;
  s.queued = queue_.size() + (busy_ ? 1 : 0);
  return s;
}

void DiskCache::writer() {
  for (;;) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Item it = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    const auto t0 = Clock::now();
    std::string failure;
    try {
      write(it);
    } catch (const Error& e) {
      failure = e.what();
    }
    lock.lock();
    stats_.write_seconds += since(t0);
    if (it.kv) {
      pending_kv_.erase(it.key);
      keep_spare(std::move(*it.kv));
    }
    if (it.state) pending_state_.erase(it.key);
    queued_bytes_ -= it.bytes;
    if (!failure.empty() && writing_) {
      spdlog::warn("disk cache: {}; the cache keeps to memory from now on", failure);
      writing_ = false;
      stats_.dropped += 1 + queue_.size();
      queue_.clear();
      pending_kv_.clear(), pending_state_.clear();
      queued_bytes_ = 0;
    }
    busy_ = false;
    done_.notify_all();
  }
}

void DiskCache::write(Item& it) {
  const int64_t end = int64_t(it.tokens.size());
  EntryHeader h;
  h.binding = binding_, h.binding_text = o_.binding, h.key = it.key, h.end = end;
  const auto ids = std::as_bytes(std::span(it.tokens));
  {
    std::lock_guard lock(m_);
    if (!writing_ || (it.kv && it.from > 0 && !kv_.contains(it.parent))) {  // parent evicted
      stats_.dropped++;
      return;
    }
  }
  if (it.kv) {
    h.kind = EntryKind::kv, h.start = it.from, h.parent = it.from > 0 ? it.parent : 0;
    h.payload_bytes = it.kv->size();
    EntryWriter w(o_.dir, h);
    w.write(ids.subspan(size_t(it.from) * sizeof(int32_t)));
    w.write(*it.kv);
    commit(w, h);
  }
  if (it.state) {
    h.kind = EntryKind::state, h.start = 0, h.parent = 0;
    h.payload_bytes = be_.state_bytes();
    EntryWriter w(o_.dir, h);
    w.write(ids);
    be_.export_state(*it.state, [&](std::span<const std::byte> b) { w.write(b); });
    commit(w, h);
  }
}

DiskCache::Entry DiskCache::commit(EntryWriter& w, const EntryHeader& h) {
  const uint64_t bytes = w.commit();
  std::vector<std::string> files;
  Entry e{h.kind, h.key, h.parent, h.start, h.end, bytes, 0};
  {
    std::lock_guard lock(m_);
    // What it needs may have gone while it was written (evicted, or removed
    // as damaged by a load): then it is of no use either.
    const bool needs_gone =
        h.kind == EntryKind::kv ? h.start > 0 && !kv_.contains(h.parent) : !kv_.contains(h.key);
    if (needs_gone) {
      files.push_back(path(h.kind, h.key));
      stats_.dropped++;
    } else {
      e.used = ++clock_;
      add(e);
      // What it needs is as recent: the budget takes leaves first.
      for (uint64_t k = h.key; kv_.contains(k);) {
        Entry& p = kv_[k];
        p.used = clock_;
        if (p.start == 0) break;
        k = p.parent;
      }
      stats_.writes++;
      stats_.written_bytes += bytes;
      evict(files);
    }
  }
  for (const std::string& f : files) ::unlink(f.c_str());
  return e;
}

std::optional<DiskCache::Loaded> DiskCache::load(std::span<const int32_t> prompt,
                                                 const PrefillPlan& plan, int64_t beyond) {
  // The keys of the prompt's prefixes at its stops.
  std::vector<std::pair<int64_t, uint64_t>> keys;
  PrefixHash h(binding_);
  int64_t at = 0;
  for (const PrefillStop& s : plan.stops) {
    h.add(prompt.subspan(size_t(at), size_t(s.at - at)));
    at = s.at;
    if (s.at > beyond) keys.emplace_back(s.at, h.key());
  }
  std::optional<std::pair<int64_t, uint64_t>> best;
  {
    std::lock_guard lock(m_);
    for (auto k = keys.rbegin(); k != keys.rend() && !best; ++k)
      if (state_.contains(k->second) && kv_.contains(k->second)) best = *k;
  }
  auto loaded = best ? read(prompt, best->first, best->second) : std::nullopt;
  std::lock_guard lock(m_);
  (loaded ? stats_.hits : stats_.misses)++;
  return loaded;
}

std::optional<DiskCache::Loaded> DiskCache::read(std::span<const int32_t> prompt, int64_t length,
                                                 uint64_t key) {
  const auto t0 = Clock::now();
  std::vector<Entry> chain;  // the pieces from position 0, then the state
  {
    std::lock_guard lock(m_);
    for (uint64_t k = key;;) {
      chain.push_back(kv_.at(k));
      if (chain.back().start == 0) break;
      k = chain.back().parent;
    }
    std::reverse(chain.begin(), chain.end());
    chain.push_back(state_.at(key));
    ++clock_;
    for (const Entry& e : chain) touch(e);
  }
  Loaded out;
  out.seq = be_.new_sequence();
  // The KV cache at once, with room for a prefill call after it.
  be_.reserve(*out.seq,
              std::min<int64_t>(length + be_.prefill_chunk(), be_.config().max_positions));
  uint64_t bytes = 0;
  const Entry* current = nullptr;
  try {
    for (const Entry& e : chain) {
      current = &e;
      EntryReader r(path(e.kind, e.key));
      const EntryHeader& h = r.header();
      if (h.binding != binding_ || h.start != e.start || h.end != e.end || h.parent != e.parent)
        fail("{}: not the entry indexed", path(e.kind, e.key));
      if (!std::ranges::equal(read_ids(r, e.end - e.start),
                              prompt.subspan(size_t(e.start), size_t(e.end - e.start))))
        fail("{}: its tokens are not the prompt's", path(e.kind, e.key));
      auto in = [&](std::span<std::byte> b) { r.read(b); };
      if (e.kind == EntryKind::kv) {
        be_.import_kv(*out.seq, e.start, e.end, in);
        out.ends.push_back(e.end);
      } else {
        out.state = be_.import_state(length, in);
      }
      r.finish();
      r.touch();
      bytes += e.bytes;
    }
  } catch (const Error& e) {
    std::vector<std::string> files;
    {
      std::lock_guard lock(m_);
      if (!map(current->kind).contains(current->key)) return std::nullopt;  // evicted meanwhile
      spdlog::warn("disk cache: {}; removed it (and what needs it)", e.what());
      drop(current->kind, current->key, files);
      stats_.removed++;
    }
    for (const std::string& f : files) ::unlink(f.c_str());
    return std::nullopt;
  }
  be_.restore(*out.seq, *out.state);
  std::lock_guard lock(m_);
  stats_.loaded_bytes += bytes;
  stats_.load_seconds += since(t0);
  return out;
}

}  // namespace tern
