// Running the pushdown automaton of a Pda over bytes and added tokens. A stack
// is a pair (node, parent frame); frames are hash-consed so that equal stacks
// are one pair and a set of stacks never holds duplicates. Each consumed byte
// pushes a level (the set of stacks after it), so going back is popping
// levels: the token trie walk of the mask computation and the rollback of
// the matcher both use that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/pda.h"

namespace tern::grammar {

// Parents that are not frames.
constexpr int32_t kBottom = -1;     // below the root rule: popping it ends the text
constexpr int32_t kExit = -2;       // below a node examined on its own: popping it leaves the rule
constexpr int32_t kAnyCaller = -3;  // popping it continues after every call of the rule

struct Pair {
  int32_t node, parent;
  bool operator==(const Pair&) const = default;
  bool operator<(const Pair& o) const { return node != o.node ? node < o.node : parent < o.parent; }
};

// Return frames, interned: (node, parent) -> id. Removing the newest frames
// first (truncate) keeps the open-addressing table exact without tombstones.
class Frames {
 public:
  struct Frame {
    int32_t node, parent;
  };
  Frames();
  int32_t intern(int32_t node, int32_t parent);
  const Frame& at(int32_t id) const { return frames_[size_t(id)]; }
  size_t size() const { return frames_.size(); }
  void truncate(size_t n);

 private:
  size_t slot_of(int32_t node, int32_t parent) const;
  void rebuild(size_t slots);
  std::vector<Frame> frames_;
  std::vector<int32_t> slots_;  // frame id or -1
};

// Level flags.
enum : uint8_t {
  kEnded = 1,   // the text may end here (the root rule popped kBottom)
  kExited = 2,  // the examined rule may end here (popped kExit)
};

class Walker {
 public:
  explicit Walker(const Pda& pda);
  // Level 0 becomes the closure of `seeds`.
  void reset(std::span<const Pair> seeds);
  // Pushes the level after byte b (or added token t); false, pushing nothing,
  // when no stack survives and the level would have no flags.
  bool push_byte(uint8_t b);
  bool push_token(int32_t t);
  // Keeps levels 0..level.
  void pop_to(size_t level);
  // Replaces the levels after `level` by the top one (keeping its frames).
  void squash(size_t level);
  size_t top_level() const { return levels_.size() - 1; }
  std::span<const Pair> pairs(size_t level) const;
  std::span<const Pair> top() const { return pairs(top_level()); }
  uint8_t flags(size_t level) const { return levels_[level].flags; }
  uint8_t flags() const { return levels_.back().flags; }
  const Frames& frames() const { return frames_; }

 private:
  struct Level {
    uint32_t begin, end;
    uint32_t frames;  // frames that existed before this level
    uint8_t flags;
  };
  // Open-addressing set of pairs for one closure; cleared by a new generation.
  class PairSet {
   public:
    void clear();
    bool insert(Pair p);  // false when present

   private:
    struct Slot {
      uint64_t key;
      uint32_t gen;
    };
    std::vector<Slot> slots_ = std::vector<Slot>(64, Slot{0, 0});
    uint32_t gen_ = 1;
    size_t count_ = 0;
  };
  void close(int32_t node, int32_t parent);
  bool finish(uint32_t begin, uint32_t frames_before);

  const Pda& pda_;
  Frames frames_;
  std::vector<Pair> pairs_;
  std::vector<Level> levels_;
  PairSet seen_;
  std::vector<Pair> work_;
  uint8_t flags_ = 0;
};

}  // namespace tern::grammar
