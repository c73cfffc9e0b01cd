// Continuous batching: requests run together by the scheduler (joining and
// leaving between decode steps, prefill calls interleaved with the others'
// steps) stream exactly what each streams alone, greedy and seeded, with the
// session cache on or off; cancelling one frees its slot for the queue.
#include <gtest/gtest.h>

#include <map>

#include "engine/scheduler.h"
#include "engine_test_util.h"

namespace tern::test {
namespace {

using json = nlohmann::ordered_json;

// A job's whole output, as run_all collects Engine::run's.
Output collect(Job& job) {
  Output out;
  for (;;) {
    auto e = job.next(std::chrono::milliseconds(100));
    if (!e) continue;
    if (e->delta) {
      out.content += e->delta->chat.content;
      out.reasoning += e->delta->chat.reasoning;
      for (auto& l : e->delta->logprobs) out.logprobs.push_back(std::move(l));
      continue;
    }
    EXPECT_EQ(e->error, "");
    if (e->result) out.result = *e->result;
    return out;
  }
}

// Requests of different lengths, sampling and completion lengths; some
// share a conversation's start (the cache forks them).
std::vector<Request> requests(TinyModel& m) {
  std::mt19937 g(21);
  std::vector<Request> rs;
  const json shared = new_conversation(g);
  for (int i = 0; i < 7; ++i) {
    json c = i % 3 == 0 ? shared : new_conversation(g);
    for (int k = 0; k < i % 4; ++k) {
      c.push_back({{"role", "assistant"}, {"content", random_words(g)}});
      c.push_back({{"role", "user"}, {"content", random_words(g)}});
    }
    Request r = request(m.chat(c), uint64_t(100 + i), i % 2 == 1, 24 + 6 * (i % 4));
    r.ignore_eos = i != 5;  // long enough to overlap; one may end at an end token
    rs.push_back(std::move(r));
  }
  return rs;
}

EngineOptions options(bool cache) {
  EngineOptions o;
  o.snapshot_every = 16;
  o.chunk = 8;  // several prefill calls a prompt, interleaved with decode steps
  o.cache_bytes = cache ? size_t(64) << 20 : 0;
  return o;
}

TEST(Batching, RequestsTogetherStreamWhatEachStreamsAlone) {
  TinyModel m(71);
  const std::vector<Request> rs = requests(m);
  std::vector<Output> alone;
  for (const Request& r : rs) {
    Engine e(m.be, &m.tok, options(false));
    alone.push_back(run_all(e, r));
  }
  for (bool cache : {false, true}) {
    Engine e(m.be, &m.tok, options(cache));
    Scheduler sched(e, 16, 4);
    std::vector<std::shared_ptr<Job>> jobs;
    for (const Request& r : rs) jobs.push_back(sched.submit(r));
    for (size_t i = 0; i < rs.size(); ++i) {
      ASSERT_TRUE(jobs[i]);
      const Output got = collect(*jobs[i]);
      expect_same(got, alone[i], "request " + std::to_string(i) + (cache ? ", cache" : ""));
      EXPECT_EQ(got.result.completion_tokens, alone[i].result.completion_tokens);
    }
    const SchedulerStats st = sched.stats();
    ASSERT_EQ(st.steps.size(), 5u);
    EXPECT_GT(st.steps[4], 0u) << "four requests never decoded together";
    EXPECT_GT(st.prefill_stall_seconds, 0) << "no prefill call came between decode steps";
  }
}

TEST(Batching, ACancelledRequestFreesItsSlotForTheQueue) {
  TinyModel m(72);
  Engine e(m.be, &m.tok, options(true));
  Scheduler sched(e, 16, 2);
  auto long_request = [&](int seed) {
    Request r = request(m.chat(json::array({{{"role", "user"}, {"content", "go on"}}})),
                        uint64_t(seed), true, 100000);
    r.ignore_eos = true;
    return r;
  };
  auto a = sched.submit(long_request(1)), b = sched.submit(long_request(2));
  auto c = sched.submit(
      request(m.chat(json::array({{{"role", "user"}, {"content", "hi"}}})), 3, false, 4));
  ASSERT_TRUE(a && b && c);
  while (!(a->started() && b->started())) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(sched.running(), 2u);
  EXPECT_FALSE(c->started());
  b->cancel();
  const Output cb = collect(*b);
  EXPECT_EQ(cb.result.finish, Finish::cancelled);
  const Output cc = collect(*c);  // ran beside a, which is still generating
  EXPECT_GT(cc.result.completion_tokens, 0);
  while (sched.running() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  bool a_ended = false;  // a generates on
  while (auto ev = a->next(std::chrono::milliseconds(0)))
    if (!ev->delta) a_ended = true;
  EXPECT_FALSE(a_ended);
  a->cancel();
  EXPECT_EQ(collect(*a).result.finish, Finish::cancelled);
}

// A request whose sequence does not fit beside the running ones waits for
// them (it neither fails nor fails the others), then streams what it would
// alone; one that fits runs at once. Needs count prompt + max_tokens.
TEST(Batching, ARequestThatDoesNotFitWaitsForTheRunningOnes) {
  TinyModel m(73);
  std::mt19937 g(3);
  const Request big = request(m.chat(new_conversation(g)), 5, true, 200);
  Request small =
      request(m.chat(json::array({{{"role", "user"}, {"content", "hi"}}})), 6, false, 4);
  Request long_one = big;
  long_one.ignore_eos = true;
  Engine alone_engine(m.be, &m.tok, options(false));
  const Output want = run_all(alone_engine, small);

  Engine e(m.be, &m.tok, options(false));
  const size_t need_big = e.sequence_need(long_one), need_small = e.sequence_need(small);
  ASSERT_GT(need_big, need_small);
  // Room for the long request and the small one, not for two long ones.
  Scheduler sched(e, 16, 4, need_big + need_small);
  auto a = sched.submit(long_one), b = sched.submit(long_one), c = sched.submit(small);
  ASSERT_TRUE(a && b && c);
  while (!a->started()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(sched.held(), need_big);
  EXPECT_FALSE(b->started()) << "b does not fit beside a";
  EXPECT_FALSE(c->started()) << "c waits behind b (the queue is FIFO)";
  a->cancel();
  EXPECT_EQ(collect(*a).result.finish, Finish::cancelled);
  const Output got = collect(*c);  // started beside b once a ended
  expect_same(got, want, "the small request");
  b->cancel();
  collect(*b);
  while (sched.running() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(sched.held(), 0u);
}

}  // namespace
}  // namespace tern::test
