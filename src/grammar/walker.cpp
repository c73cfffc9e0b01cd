#include "grammar/walker.h"

#include <algorithm>

namespace tern::grammar {
namespace {

uint64_t key_of(int32_t node, int32_t parent) {
  return uint64_t(uint32_t(node)) << 32 | uint32_t(parent);
}

size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return size_t(k);
}

}  // namespace

Frames::Frames() {
  slots_.assign(1024, -1);
}

size_t Frames::slot_of(int32_t node, int32_t parent) const {
  const size_t mask = slots_.size() - 1;
  size_t i = mix(key_of(node, parent)) & mask;
  while (slots_[i] >= 0) {
    const Frame& f = frames_[size_t(slots_[i])];
    if (f.node == node && f.parent == parent) return i;
    i = (i + 1) & mask;
  }
  return i;
}

int32_t Frames::intern(int32_t node, int32_t parent) {
  size_t i = slot_of(node, parent);
  if (slots_[i] >= 0) return slots_[i];
  auto id = int32_t(frames_.size());
  frames_.push_back({node, parent});
  slots_[i] = id;
  if (frames_.size() * 2 > slots_.size()) rebuild(slots_.size() * 2);
  return id;
}

void Frames::truncate(size_t n) {
  while (frames_.size() > n) {
    const Frame& f = frames_.back();
    slots_[slot_of(f.node, f.parent)] = -1;  // the newest: clearing its slot undoes its insertion
    frames_.pop_back();
  }
}

void Frames::rebuild(size_t slots) {
  slots_.assign(slots, -1);
  for (size_t id = 0; id < frames_.size(); ++id)
    slots_[slot_of(frames_[id].node, frames_[id].parent)] = int32_t(id);
}

void Walker::PairSet::clear() {
  if (++gen_ == 0) {  // wrapped: forget every stamp
    for (Slot& s : slots_) s.gen = 0;
    gen_ = 1;
  }
  count_ = 0;
}

bool Walker::PairSet::insert(Pair p) {
  if ((count_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{0, 0});
    for (const Slot& s : old)
      if (s.gen == gen_) {
        size_t i = mix(s.key) & (slots_.size() - 1);
        while (slots_[i].gen == gen_) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = s;
      }
  }
  const uint64_t key = key_of(p.node, p.parent);
  const size_t mask = slots_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (slots_[i].gen != gen_) {
      slots_[i] = {key, gen_};
      ++count_;
      return true;
    }
    if (slots_[i].key == key) return false;
  }
}

Walker::Walker(const Pda& pda) : pda_(pda) {}

void Walker::reset(std::span<const Pair> seeds) {
  pairs_.clear();
  levels_.clear();
  frames_.truncate(0);
  seen_.clear();
  flags_ = 0;
  for (const Pair& p : seeds) close(p.node, p.parent);
  std::sort(pairs_.begin(), pairs_.end());
  levels_.push_back({0, uint32_t(pairs_.size()), 0, flags_});
}

// Adds the stacks reachable from (node, parent) without consuming: calls
// push a frame (none for a call whose return node is a dead end), a final
// node pops its parent.
void Walker::close(int32_t node, int32_t parent) {
  work_.push_back({node, parent});
  while (!work_.empty()) {
    const Pair p = work_.back();
    work_.pop_back();
    if (!seen_.insert(p)) continue;
    const Pda::Node& n = pda_.nodes[size_t(p.node)];
    if (n.consumes()) pairs_.push_back(p);
    for (const Pda::Call& c : pda_.calls_of(p.node)) {
      int32_t up = pda_.nodes[size_t(c.ret)].tail() ? p.parent : frames_.intern(c.ret, p.parent);
      work_.push_back({pda_.rule_start[size_t(c.rule)], up});
    }
    if (!n.final) continue;
    if (p.parent >= 0) {
      const Frames::Frame& f = frames_.at(p.parent);
      work_.push_back({f.node, f.parent});
    } else if (p.parent == kBottom) {
      flags_ |= kEnded;
    } else if (p.parent == kExit) {
      flags_ |= kExited;
    } else {
      for (int32_t ret : pda_.call_sites[size_t(n.rule)]) work_.push_back({ret, kAnyCaller});
      if (n.rule == pda_.root) flags_ |= kEnded;
    }
  }
}

bool Walker::finish(uint32_t begin, uint32_t frames_before) {
  if (pairs_.size() == begin && flags_ == 0) {
    frames_.truncate(frames_before);
    return false;
  }
  if (pairs_.size() - begin > 1) std::sort(pairs_.begin() + begin, pairs_.end());
  levels_.push_back({begin, uint32_t(pairs_.size()), frames_before, flags_});
  return true;
}

bool Walker::push_byte(uint8_t b) {
  const Level top = levels_.back();
  const auto begin = uint32_t(pairs_.size()), frames_before = uint32_t(frames_.size());
  if (top.end - top.begin == 1) {  // one stack and a plain step: no closure needed
    const Pair p = pairs_[top.begin];
    int32_t t = pda_.step(p.node, b);
    if (t < 0) return false;
    const Pda::Node& n = pda_.nodes[size_t(t)];
    if (!n.final && n.c0 == n.c1) {
      pairs_.push_back({t, p.parent});
      levels_.push_back({begin, begin + 1, frames_before, 0});
      return true;
    }
  }
  seen_.clear();
  flags_ = 0;
  for (uint32_t k = top.begin; k < top.end; ++k) {
    const Pair p = pairs_[k];
    int32_t t = pda_.step(p.node, b);
    if (t >= 0) close(t, p.parent);
  }
  return finish(begin, frames_before);
}

bool Walker::push_token(int32_t token) {
  const Level top = levels_.back();
  const auto begin = uint32_t(pairs_.size()), frames_before = uint32_t(frames_.size());
  seen_.clear();
  flags_ = 0;
  for (uint32_t k = top.begin; k < top.end; ++k) {
    const Pair p = pairs_[k];
    for (const Pda::TokenEdge& e : pda_.tokens_of(p.node))
      if (e.token == token) close(e.to, p.parent);
  }
  return finish(begin, frames_before);
}

void Walker::pop_to(size_t level) {
  if (level + 1 >= levels_.size()) return;
  frames_.truncate(levels_[level + 1].frames);
  pairs_.resize(levels_[level].end);
  levels_.resize(level + 1);
}

void Walker::squash(size_t level) {
  if (level + 1 >= levels_.size()) return;
  const Level top = levels_.back();
  const uint32_t begin = levels_[level].end;
  std::copy(pairs_.begin() + top.begin, pairs_.begin() + top.end, pairs_.begin() + begin);
  pairs_.resize(begin + (top.end - top.begin));
  const Level squashed{begin, uint32_t(pairs_.size()), levels_[level + 1].frames, top.flags};
  levels_.resize(level + 1);
  levels_.push_back(squashed);
}

std::span<const Pair> Walker::pairs(size_t level) const {
  const Level& l = levels_[level];
  return {pairs_.data() + l.begin, l.end - l.begin};
}

}  // namespace tern::grammar
