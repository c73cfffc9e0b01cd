// The scheduler's background work (prefilling a likely next turn while idle):
// it extends the session cache so the next turn is served from its own user
// message's start, it is queued only when no request waits, and a request
// submitted after it cancels it. And next_turn_prefix, what that work
// prefills: a prefix of the next turn's prompt, through its <|im_start|>.
#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "backends/scripted_backend.h"
#include "chat/next_turn.h"
#include "engine/scheduler.h"
#include "engine_test_util.h"

namespace tern::test {
namespace {

using json = nlohmann::ordered_json;

// The end event of a job.
Job::Event end_of(Job& job) {
  for (;;)
    if (auto e = job.next(std::chrono::milliseconds(50)); e && !e->delta) return *e;
}

// Whether the job has ended, without waiting (its deltas consumed).
bool ended_now(Job& job) {
  while (auto e = job.next(std::chrono::milliseconds(0)))
    if (!e->delta) return true;
  return false;
}

struct Fixture {
  explicit Fixture(int parallel = 1)
      : m(52),
        be(m.be.config(), m.tok, {{"rivers", "Rivers flow to the sea."}}),
        engine(be, &m.tok, EngineOptions{}),
        sched(engine, 8, parallel) {}
  Request ask(const json& messages) const {
    Request r;
    r.prompt = m.chat(messages);
    r.max_tokens = 64;
    return r;
  }
  TinyModel m;
  ScriptedBackend be;
  Engine engine;
  Scheduler sched;
};

TEST(Scheduler, BackgroundPrefillServesTheNextTurnFromItsUserMessage) {
  Fixture f;
  json msgs = {{{"role", "user"}, {"content", "Tell me about rivers."}}};
  auto first = f.sched.submit(f.ask(msgs));
  ASSERT_TRUE(first);
  const Job::Event e1 = end_of(*first);
  ASSERT_TRUE(e1.result);
  ParsedDelta answer;
  answer.content = "Rivers flow to the sea.";
  const std::vector<int32_t> prefix =
      next_turn_prefix({{"messages", msgs}, {"enable_thinking", false}}, f.m.tok, answer);
  msgs.push_back({{"role", "assistant"}, {"content", answer.content}});
  Request bg;
  bg.prompt = prefix;
  bg.max_tokens = 0;
  auto job = f.sched.submit_background(bg);
  ASSERT_TRUE(job);
  const Job::Event e2 = end_of(*job);
  ASSERT_TRUE(e2.result);
  EXPECT_EQ(e2.result->completion_tokens, 0);
  msgs.push_back({{"role", "user"}, {"content", "And mountains?"}});
  auto next = f.sched.submit(f.ask(msgs));
  const Job::Event e3 = end_of(*next);
  ASSERT_TRUE(e3.result);
  // Served from the snapshot at the new user message's start, past the
  // previous prompt (which alone would reach its generation prompt).
  EXPECT_EQ(e3.result->cached_tokens, int64_t(prefix.size()) - 1);
  EXPECT_GT(e3.result->cached_tokens, e1.result->prompt_tokens);
}

TEST(Scheduler, BackgroundWorkWaitsBehindNothingAndYieldsToRequests) {
  Fixture f;
  const json msgs = {{{"role", "user"}, {"content", "Tell me about rivers."}}};
  std::latch in_hook(1), release(1);
  // The engine thread is held inside the first request's end hook.
  auto held = f.sched.submit(f.ask(msgs), [&](const Job&, const Job::Event&) {
    in_hook.count_down();
    release.wait();
  });
  in_hook.wait();
  Request bg = f.ask(msgs);
  bg.max_tokens = 0;
  auto b = f.sched.submit_background(bg);
  ASSERT_TRUE(b);                               // nothing waited
  EXPECT_FALSE(f.sched.submit_background(bg));  // b waits: not queued behind it
  auto c = f.sched.submit(f.ask(msgs));         // cancels b
  ASSERT_TRUE(c);
  release.count_down();
  const Job::Event eb = end_of(*b), ec = end_of(*c);
  ASSERT_TRUE(eb.result);
  EXPECT_EQ(eb.result->finish, Finish::cancelled);
  ASSERT_TRUE(ec.result);
  EXPECT_NE(ec.result->finish, Finish::cancelled);
  EXPECT_GT(ec.result->completion_tokens, 0);
  end_of(*held);
}

// Background work holds the session it extends until it ends: a request
// that cancels it, with a slot free beside it, still gets that session.
TEST(Scheduler, ARequestThatCancelsBackgroundWorkGetsItsSession) {
  Fixture f(2);
  json msgs = {{{"role", "user"}, {"content", "Tell me about rivers."}}};
  std::latch in_hook(1), release(1);
  auto first = f.sched.submit(f.ask(msgs), [&](const Job&, const Job::Event&) {
    in_hook.count_down();
    release.wait();
  });
  in_hook.wait();  // the first turn is cached; the engine thread waits here
  ParsedDelta answer;
  answer.content = "Rivers flow to the sea.";
  auto bg = f.sched.submit_background(prefill_only(
      next_turn_prefix({{"messages", msgs}, {"enable_thinking", false}}, f.m.tok, answer)));
  ASSERT_TRUE(bg);
  msgs.push_back({{"role", "assistant"}, {"content", answer.content}});
  msgs.push_back({{"role", "user"}, {"content", "And mountains?"}});
  auto next = f.sched.submit(f.ask(msgs));  // cancels bg, both queued
  ASSERT_TRUE(next);
  release.count_down();
  const Job::Event e1 = end_of(*first), eb = end_of(*bg), en = end_of(*next);
  ASSERT_TRUE(e1.result && eb.result && en.result);
  EXPECT_EQ(eb.result->finish, Finish::cancelled);
  EXPECT_GT(en.result->cached_tokens, e1.result->prompt_tokens / 2)
      << "the cancelled background work held the session";
}

// Beside a running request (two slots), background work waits; one
// superseded by the next is cancelled and ends at once, and the latest runs
// when the request is done.
TEST(Scheduler, BackgroundWorkBesideARequestRunsOnlyAfterIt) {
  TinyModel m(53);
  Engine e(m.be, &m.tok, EngineOptions{});
  Scheduler sched(e, 8, 2);
  Request r =
      request(m.chat(json::array({{{"role", "user"}, {"content", "go on"}}})), 1, false, 200);
  r.ignore_eos = true;
  auto run = sched.submit(r);
  while (!run->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Request bg = prefill_only(m.chat(json::array({{{"role", "user"}, {"content", "rivers"}}})));
  auto b1 = sched.submit_background(bg);
  ASSERT_TRUE(b1);
  while (!b1->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto b2 = sched.submit_background(bg);  // supersedes b1
  ASSERT_TRUE(b2);
  const Job::Event e1 = end_of(*b1);
  ASSERT_TRUE(e1.result);
  EXPECT_EQ(e1.result->finish, Finish::cancelled);
  // b1 ended at once, b2 waits for the request.
  if (ended_now(*run)) FAIL() << "the cancelled background work waited for the request";
  if (ended_now(*b2)) FAIL() << "background work ran beside a request";
  const Job::Event er = end_of(*run), e2 = end_of(*b2);
  ASSERT_TRUE(er.result && e2.result);
  EXPECT_EQ(er.result->completion_tokens, 200);
  EXPECT_NE(e2.result->finish, Finish::cancelled);
}

// The next turn's prompt, rendered and encoded, begins with the prefix, which
// ends at that turn's message start: after a reasoning answer (reasoning
// dropped from history), and after a tool call answered by a tool message.
TEST(NextTurnPrefix, IsWhereTheNextTurnsPromptStartsItsMessage) {
  const TinyModel m(52);
  const int32_t start = *m.tok.token_id("<|im_start|>");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  ParsedDelta thought;
  thought.reasoning = "They ask about rivers.", thought.content = "Rivers flow.";
  ParsedDelta call;
  call.tool_calls.push_back({"weather", {{"city", "Paris"}}});
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}},
                     {{"role", "user"}, {"content", "Tell me about rivers."}}};
  for (const auto& [answer, next, thinking] :
       {std::tuple{thought, json{{"role", "user"}, {"content", "And seas?"}}, true},
        std::tuple{call, json{{"role", "tool"}, {"content", "{\"sky\": \"clear\"}"}}, false}}) {
    json req = {{"messages", msgs}, {"tools", tools}, {"enable_thinking", thinking}};
    const std::vector<int32_t> prefix = next_turn_prefix(req, m.tok, answer);
    ASSERT_FALSE(prefix.empty());
    EXPECT_EQ(prefix.back(), start);
    json said = {{"role", "assistant"}, {"content", answer.content}};
    if (!answer.tool_calls.empty())
      said["tool_calls"] =
          json::array({{{"type", "function"},
                        {"function", {{"name", "weather"}, {"arguments", {{"city", "Paris"}}}}}}});
    req["messages"].push_back(said);
    req["messages"].push_back(next);
    req["add_generation_prompt"] = true;
    const std::vector<int32_t> turn = m.tok.encode(render_chat(req));
    ASSERT_GT(turn.size(), prefix.size());
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), turn.begin()));
    EXPECT_EQ(turn[prefix.size()], *m.tok.token_id("user"));
  }
}

}  // namespace
}  // namespace tern::test
