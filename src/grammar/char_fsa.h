// Automata over Unicode code points: the languages of JSON strings (patterns,
// formats, length bounds, enumerations, property names to avoid) and of
// numbers within bounds. They are combined by intersection, then written as
// byte expressions: UTF-8 text as is, or the body of a JSON string with
// every way JSON may escape each character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/codepoints.h"
#include "grammar/grammar.h"

namespace tern::grammar {

// String constraints are refused above this many automaton states.
constexpr size_t kMaxCharStates = 100000;

class CharFsa {
 public:
  struct Edge {
    uint32_t lo, hi;
    int to;
  };
  // One state, the start (state 0), not final: no string at all.
  CharFsa();
  int add_state();
  void add_edge(int from, uint32_t lo, uint32_t hi, int to) {
    edges_[size_t(from)].push_back({lo, hi, to});
  }
  void add_edges(int from, const CodepointSet& set, int to);
  void add_eps(int from, int to) { eps_[size_t(from)].push_back(to); }
  void set_final(int s) { final_[size_t(s)] = 1; }
  // Copies other's states in; returns the number of other's state 0.
  int insert(const CharFsa& other);

  size_t size() const { return edges_.size(); }
  const std::vector<Edge>& edges(int s) const { return edges_[size_t(s)]; }
  const std::vector<int>& eps(int s) const { return eps_[size_t(s)]; }
  bool final(int s) const { return final_[size_t(s)] != 0; }

 private:
  std::vector<std::vector<Edge>> edges_;
  std::vector<std::vector<int>> eps_;
  std::vector<char> final_;
};

CharFsa fsa_literal(std::string_view utf8);
// chars{min,max}; max < 0: unbounded.
CharFsa fsa_repeat(const CodepointSet& chars, int min, int max);
CharFsa fsa_union(const std::vector<CharFsa>& parts);
CharFsa fsa_concat(const std::vector<CharFsa>& parts);
// The strings both accept.
CharFsa fsa_intersect(const CharFsa& a, const CharFsa& b);
// The strings that are none of `words` (UTF-8).
CharFsa fsa_none_of(const std::vector<std::string>& words);
bool fsa_accepts(const CharFsa& a, std::string_view utf8);
bool fsa_empty(const CharFsa& a);

// The strings as UTF-8 bytes.
ExprPtr fsa_text(const CharFsa& a);
// The strings as the body of a JSON string (without the quotes): characters
// as UTF-8, or escaped as \" \\ \/ \b \f \n \r \t or \uXXXX (not surrogates,
// so that every escape is one character); control characters only escaped.
ExprPtr fsa_json_body(const CharFsa& a);

}  // namespace tern::grammar
