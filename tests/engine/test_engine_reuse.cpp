// Session reuse is exact: every request's output (tokens, their logprobs,
// text) is the same with the session cache as without it, greedy and
// seeded, at prompt lengths on and around the prefill plan's stops, over
// edited and branched conversations, and with the cache under memory
// pressure; later turns of a conversation are served from the cache.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace tern::test {
namespace {

using json = nlohmann::ordered_json;

struct Pair {
  TinyModel& m;
  EngineOptions with, without;
  Engine cached, fresh;
  Pair(TinyModel& model, EngineOptions o)
      : m(model),
        with(o),
        without(no_cache(o)),
        cached(m.be, &m.tok, with),
        fresh(m.be, &m.tok, without) {}
  static EngineOptions no_cache(EngineOptions o) {
    o.cache_bytes = 0;
    return o;
  }
  // Runs r on both; returns the cached run.
  Output both(const Request& r, const std::string& what) {
    const Output a = run_all(cached, r), b = run_all(fresh, r);
    expect_same(a, b, what);
    EXPECT_EQ(b.result.cached_tokens, 0) << what;
    return a;
  }
};

EngineOptions small_plan() {
  EngineOptions o;
  o.snapshot_every = 16;
  o.chunk = 8;
  return o;
}

TEST(EngineReuse, ConversationTurnsAreServedFromTheCacheAndExact) {
  TinyModel m(41);
  for (bool sampled : {false, true}) {
    Pair p(m, small_plan());
    json msgs = json::array({{{"role", "system"}, {"content", "You are terse."}},
                             {{"role", "user"}, {"content", "Name three rivers."}}});
    for (int turn = 0; turn < 4; ++turn) {
      const Output a =
          p.both(request(m.chat(msgs), 7 + turn, sampled), "turn " + std::to_string(turn));
      if (turn > 0) {
        EXPECT_GT(a.result.cached_tokens, 10) << "turn " << turn;
      }
      msgs.push_back({{"role", "assistant"}, {"content", a.content}});
      msgs.push_back({{"role", "user"}, {"content", "And " + std::to_string(turn) + " more?"}});
    }
  }
}

// Prompts whose prefill ends on, just before and just after the plan's stops
// (every 8 tokens, snapshots every 16), each after a prompt one token
// shorter or longer that left snapshots behind.
TEST(EngineReuse, PromptLengthsAroundTheStopsAreExact) {
  TinyModel m(42);
  Pair p(m, small_plan());
  std::mt19937 g(3);
  std::vector<int32_t> base(80);
  for (int32_t& t : base) t = int32_t(g() % 150000);
  for (int n : {15, 16, 17, 18, 31, 32, 33, 34, 47, 48, 49, 64, 65}) {
    for (int prev : {n - 1, n + 1, n}) {
      p.both(request({base.begin(), base.begin() + prev}, 1, true, 4),
             "prev " + std::to_string(prev));
      p.both(request({base.begin(), base.begin() + n}, 1, true, 4),
             "n " + std::to_string(n) + " after " + std::to_string(prev));
    }
  }
}

// Random edits, branches, regenerations and new turns of a few
// conversations, with the cache small enough to evict.
TEST(EngineReuse, EditedAndBranchedTurnsUnderMemoryPressureAreExact) {
  TinyModel m(43);
  EngineOptions o = small_plan();
  Pair probe(m, o);
  run_all(probe.cached,
          request(m.chat(json::array({{{"role", "user"}, {"content", "hi"}}})), 1, false));
  const size_t per_session = probe.cached.cache().bytes();
  ASSERT_GT(per_session, 0u);
  o.cache_bytes = 3 * per_session;  // a few sessions with their snapshots
  Pair p(m, o);
  std::mt19937 g(9);
  std::vector<json> convs;
  for (int step = 0; step < 40; ++step) {
    const int op = int(g() % 5);
    if (convs.empty() || op == 0) {  // a new conversation
      convs.push_back(new_conversation(g));
    }
    size_t at = g() % convs.size();
    if (op == 1 && convs[at].size() > 2)
      convs[at].back()["content"] = random_words(g);  // edit the last turn
    if (op == 2 && convs[at].size() > 3) {            // branch from an earlier turn
      json b = json::array();
      for (size_t i = 0; i + 2 < convs[at].size(); ++i) b.push_back(convs[at][i]);
      b.push_back({{"role", "user"}, {"content", random_words(g)}});
      convs.push_back(b);
      at = convs.size() - 1;
    }
    json& now = convs[at];
    const bool sampled = g() % 2 == 0;
    const Output a = p.both(request(m.chat(now), step, sampled, 1 + int(g() % 8)),
                            "step " + std::to_string(step));
    EXPECT_LE(p.cached.cache().bytes(), o.cache_bytes) << "step " << step;
    if (op != 3) {  // op 3 regenerates: the same prompt again next time
      now.push_back({{"role", "assistant"}, {"content", a.content}});
      now.push_back({{"role", "user"}, {"content", random_words(g)}});
    }
  }
}

TEST(EngineReuse, AnExactRepeatPrefillsNothing) {
  TinyModel m(44);
  Engine e(m.be, &m.tok, small_plan());
  const auto prompt = m.chat(json::array({{{"role", "user"}, {"content", "Say something long."}}}));
  const Output a = run_all(e, request(prompt, 5, true));
  const Output b = run_all(e, request(prompt, 5, true));
  expect_same(a, b, "repeat");
  EXPECT_EQ(b.result.cached_tokens, int64_t(prompt.size()) - 1);
}

TEST(EngineReuse, NoBudgetKeepsNothing) {
  TinyModel m(45);
  EngineOptions o = small_plan();
  o.cache_bytes = 0;
  Engine e(m.be, &m.tok, o);
  const auto prompt = m.chat(json::array({{{"role", "user"}, {"content", "hello"}}}));
  run_all(e, request(prompt, 5, false));
  EXPECT_EQ(e.cache().bytes(), 0u);
  EXPECT_EQ(run_all(e, request(prompt, 5, false)).result.cached_tokens, 0);
}

}  // namespace
}  // namespace tern::test
