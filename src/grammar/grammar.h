// The grammar IR every front end builds (GBNF, JSON Schema, the Qwen tool-call
// format): named rules whose bodies are expressions over bytes, references to
// rules and added-token ids. compile() (pda.h) turns a Grammar into one
// automaton per rule, which the matcher runs as a pushdown automaton.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tern::grammar {

// A set of byte values.
class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet range(uint8_t lo, uint8_t hi);
  void add(uint8_t lo, uint8_t hi);
  bool contains(uint8_t b) const { return bits_[b >> 6] >> (b & 63) & 1; }
  bool empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  // The maximal runs [lo, hi] of members, in increasing order.
  std::vector<std::pair<uint8_t, uint8_t>> runs() const;
  ByteSet& operator|=(const ByteSet& o);
  const std::array<uint64_t, 4>& words() const { return bits_; }
  bool subset_of(const ByteSet& o) const {
    for (size_t i = 0; i < 4; ++i)
      if (bits_[i] & ~o.bits_[i]) return false;
    return true;
  }
  bool operator==(const ByteSet& o) const = default;

 private:
  std::array<uint64_t, 4> bits_{};
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// An automaton whose edges are expressions: structures that share a
// continuation (object members, encoded character automata) without copies.
struct ExprGraph {
  struct Edge {
    int from, to;
    ExprPtr label;  // nullptr: an empty (epsilon) edge
  };
  int states = 0, start = 0;
  std::vector<int> finals;
  std::vector<Edge> edges;
};

struct Expr {
  enum class Kind : uint8_t { empty, nothing, bytes, tokens, ref, seq, alt, repeat, graph };
  Kind kind = Kind::empty;
  ByteSet bytes;                                  // bytes: one byte of the set
  std::vector<std::pair<uint8_t, uint8_t>> runs;  // bytes: the set as maximal ranges
  std::vector<int32_t> tokens;                    // tokens: one of these (added) token ids
  int rule = -1;                                  // ref
  std::vector<ExprPtr> items;                     // seq, alt; repeat: items[0]
  int min = 0, max = 0;                           // repeat: max < 0 means unbounded
  std::shared_ptr<const ExprGraph> graph;
};

ExprPtr empty();    // the empty string
ExprPtr nothing();  // no string at all
ExprPtr bytes(const ByteSet& set);
ExprPtr byte_range(uint8_t lo, uint8_t hi);
ExprPtr literal(std::string_view text);
ExprPtr tokens(std::vector<int32_t> ids);
ExprPtr ref(int rule);
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);
ExprPtr repeat(ExprPtr item, int min, int max);  // max < 0: unbounded
inline ExprPtr opt(ExprPtr e) {
  return repeat(std::move(e), 0, 1);
}
inline ExprPtr star(ExprPtr e) {
  return repeat(std::move(e), 0, -1);
}
ExprPtr graph(ExprGraph g);

class Grammar {
 public:
  // A new rule whose body is given later by define().
  int declare(std::string name);
  void define(int rule, ExprPtr body);
  int add(std::string name, ExprPtr body);
  // Drops the rules from `size` on (nothing may refer to them any more).
  void truncate(int size);
  int size() const { return int(names_.size()); }
  const std::string& name(int rule) const { return names_[size_t(rule)]; }
  const ExprPtr& body(int rule) const { return bodies_[size_t(rule)]; }
  int find(std::string_view name) const;  // -1 when absent
  // A rule without references or tokens may carry a key naming its body
  // exactly; its compiled automaton is then kept for the process and reused
  // by any grammar with a rule of the same key (JSON string rules).
  void set_key(int rule, std::string key) { keys_[size_t(rule)] = std::move(key); }
  const std::string& key(int rule) const { return keys_[size_t(rule)]; }
  int root() const { return root_; }
  void set_root(int rule) { root_ = rule; }

 private:
  std::vector<std::string> names_;
  std::vector<ExprPtr> bodies_;
  std::vector<std::string> keys_;
  int root_ = 0;
};

// A grammar whose root matches a's root or b's (for an answer that may be
// either a JSON document or tool calls).
Grammar either(const Grammar& a, const Grammar& b);
// g preceded by up to n newlines (the model's "\n\n" after </think>).
Grammar after_newlines(Grammar g, int n);

}  // namespace tern::grammar
