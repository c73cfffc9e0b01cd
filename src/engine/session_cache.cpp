#include "engine/session_cache.h"

#include <algorithm>
#include <set>

namespace tern {

SessionCache::SessionCache(Backend& be, size_t budget, DiskCache* disk)
    : be_(be), budget_(budget), disk_(disk) {}

Session SessionCache::acquire(std::span<const int32_t> prompt, const PrefillPlan& plan) {
  auto best = sessions_.end();
  int64_t best_len = 0;
  std::shared_ptr<Snapshot> best_snap;
  int64_t matched = 0;
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    const auto& t = it->tokens;
    const size_t n = std::min(t.size(), prompt.size());
    const int64_t common = int64_t(
        std::mismatch(t.begin(), t.begin() + ptrdiff_t(n), prompt.begin()).first - t.begin());
    matched = std::max(matched, common);
    for (auto s = it->snapshots.rbegin(); s != it->snapshots.rend(); ++s) {
      if (s->first > common || !plan.stops_at(s->first)) continue;
      if (s->first > best_len ||
          (s->first == best_len && best != sessions_.end() && it->used > best->used)) {
        best = it, best_len = s->first, best_snap = s->second;
      }
      break;
    }
  }
  if (disk_) {
    if (auto d = disk_->load(prompt, plan, best_len)) {
      Session out;
      out.seq = std::move(d->seq);
      const int64_t len = out.seq->length();
      out.tokens.assign(prompt.begin(), prompt.begin() + len);
      out.snapshots[len] = std::make_shared<Snapshot>(Snapshot{std::move(d->state), ++clock_});
      out.on_disk.insert(d->ends.begin(), d->ends.end());
      out.matched = std::max(matched, len);
      out.loaded = len;
      return out;
    }
  }
  if (best == sessions_.end()) {
    Session fresh;
    fresh.seq = be_.new_sequence();
    fresh.matched = matched;
    return fresh;
  }
  best_snap->used = best->used = ++clock_;
  Session out;
  if (best_len >= best->generation_start) {
    // The rest is its last completion: rewind it in place.
    out = std::move(*best);
    sessions_.erase(best);
    be_.restore(*out.seq, *best_snap->state);
    out.tokens.resize(size_t(best_len));
    out.snapshots.erase(out.snapshots.upper_bound(best_len), out.snapshots.end());
    out.on_disk.erase(out.on_disk.upper_bound(best_len), out.on_disk.end());
  } else {
    // A branch inside an earlier prompt: both may be wanted again.
    out.seq = be_.fork(*best->seq, *best_snap->state);
    out.tokens.assign(prompt.begin(), prompt.begin() + best_len);
    out.snapshots.insert(best->snapshots.begin(), best->snapshots.upper_bound(best_len));
    out.on_disk.insert(best->on_disk.begin(), best->on_disk.upper_bound(best_len));
  }
  out.matched = matched;
  out.loaded = 0;
  update_bytes();
  return out;
}

size_t SessionCache::session_bytes(const Session& s) const {
  size_t b = s.seq ? be_.sequence_bytes(*s.seq) : 0;
  for (const auto& [len, snap] : s.snapshots) b += snap->state->bytes();
  return b;
}

size_t SessionCache::total(const Session* extra) const {
  size_t b = 0;
  std::set<const Snapshot*> seen;
  auto add = [&](const Session& s) {
    if (s.seq) b += be_.sequence_bytes(*s.seq);
    for (const auto& [len, snap] : s.snapshots)
      if (seen.insert(snap.get()).second) b += snap->state->bytes();
  };
  for (const Session& s : sessions_) add(s);
  if (extra) add(*extra);
  return b;
}

bool SessionCache::evict_one(const Session* keep) {
  auto held = [&](const Snapshot* p) {
    if (!keep) return false;
    for (const auto& [len, snap] : keep->snapshots)
      if (snap.get() == p) return true;
    return false;
  };
  auto oldest_session = sessions_.end();
  const Snapshot* oldest_snap = nullptr;
  uint64_t snap_used = UINT64_MAX;
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (oldest_session == sessions_.end() || it->used < oldest_session->used) oldest_session = it;
    for (const auto& [len, snap] : it->snapshots)
      if (snap->used < snap_used && !held(snap.get()))
        snap_used = snap->used, oldest_snap = snap.get();
  }
  if (oldest_session == sessions_.end()) return false;
  if (oldest_snap != nullptr && snap_used < oldest_session->used) {
    for (Session& s : sessions_)
      std::erase_if(s.snapshots, [&](const auto& kv) { return kv.second.get() == oldest_snap; });
  } else {
    sessions_.erase(oldest_session);
  }
  return true;
}

bool SessionCache::snapshot(Session& active) {
  if (budget_ == 0 && !disk_) return false;
  const int64_t at = active.seq->length();
  auto snap = std::make_shared<Snapshot>();
  snap->state = be_.save(*active.seq);
  snap->used = ++clock_;
  if (disk_) disk_->store(active.tokens, *active.seq, snap->state, active.on_disk);
  if (budget_ == 0) return false;
  active.snapshots[at] = std::move(snap);
  if (make_room(active, 0)) return true;
  active.snapshots.erase(at);
  update_bytes();
  return false;
}

bool SessionCache::make_room(const Session& active, size_t bytes) {
  if (session_bytes(active) + bytes > budget_) return false;  // evicting others would not do
  while (total(&active) + bytes > budget_)
    if (!evict_one(&active)) {
      update_bytes();
      return false;
    }
  update_bytes();
  return true;
}

void SessionCache::release(Session s) {
  if (budget_ == 0 || !s.seq) return;
  s.used = ++clock_;
  sessions_.push_front(std::move(s));
  while (total(nullptr) > budget_ && evict_one(nullptr)) {
  }
  update_bytes();
}

void SessionCache::update_bytes() {
  bytes_.store(total(nullptr), std::memory_order_relaxed);
}

}  // namespace tern
