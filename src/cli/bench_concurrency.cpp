#include "cli/bench_concurrency.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "engine/scheduler.h"

namespace tern::cli {

namespace {

// When each generated token came, in seconds from `t0`: the request started
// `start` seconds after it.
std::vector<double> token_times(const Result& r, double start) {
  std::vector<double> t;
  if (r.completion_tokens == 0) return t;
  t.push_back(start + r.ttft_s);
  for (float g : r.token_gaps) t.push_back(t.back() + g);
  return t;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// A prompt of `ctx` random tokens asking for `gen` tokens.
Request random_request(const Backend& be, int64_t ctx, int gen, uint64_t seed) {
  CounterRng rng(seed);
  Request r;
  r.prompt.resize(size_t(ctx));
  for (int32_t& t : r.prompt) t = int32_t(rng.next_u64() % uint64_t(be.config().vocab));
  r.max_tokens = gen;
  r.ignore_eos = true;
  r.output = Request::Output::text;
  return r;
}

// The job's end: its result (tern::Error on failure).
Result result_of(Job& j) {
  for (;;) {
    auto e = j.next(std::chrono::milliseconds(100));
    if (!e || e->delta) continue;
    if (!e->result) fail("tern bench --concurrency: {}", e->error);
    return *e->result;
  }
}

// Seconds from submitting r to its first token, while `beside` requests of
// the same context decode (0: alone).
double ttft_beside(Engine& engine, const Request& r, int64_t beside, uint64_t seed) {
  Scheduler sched(engine, size_t(beside + 1), int(beside + 1));
  std::vector<std::shared_ptr<Job>> busy;
  for (int64_t i = 0; i < beside; ++i) {
    busy.push_back(sched.submit(
        random_request(engine.backend(), int64_t(r.prompt.size()), 1 << 20, seed + uint64_t(i))));
    for (;;)  // its prompt is in: it decodes
      if (auto e = busy.back()->next(std::chrono::milliseconds(100)); e && e->delta) break;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto job = sched.submit(r);
  const Result res = result_of(*job);
  const double s = std::chrono::duration<double>(*job->started() - t0).count() + res.ttft_s;
  for (auto& b : busy) b->cancel();
  for (auto& b : busy) result_of(*b);
  return s;
}

}  // namespace

nlohmann::json run_concurrency_bench(Backend& be, const ConcurrencyBenchOptions& o) {
  std::printf("%9s %8s %12s %12s %10s %10s %8s %10s %8s\n", "context", "streams", "tok/s all",
              "tok/s each", "itl p50", "itl p99", "tokens", "ttft new", "x alone");
  nlohmann::json rows = nlohmann::json::array();
  EngineOptions eo;
  eo.cache_bytes = 0;
  for (int64_t ctx : o.contexts) {
    // One more request's first token, alone and beside n - 1 decoding.
    Engine probe(be, nullptr, eo);
    const Request one_more = random_request(be, ctx, 1, o.seed + uint64_t(ctx) * 977);
    ttft_beside(probe, one_more, 0, o.seed);  // warm-up: the first call of its shapes
    const double alone = ttft_beside(probe, one_more, 0, o.seed);
    for (int64_t n : o.streams) {
      Engine engine(be, nullptr, eo);
      Scheduler sched(engine, size_t(n), int(n));
      std::vector<std::shared_ptr<Job>> jobs;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i)
        jobs.push_back(
            sched.submit(random_request(be, ctx, o.gen, o.seed + uint64_t(ctx * 131 + i))));
      // On one clock: the engine may start a request before the next is submitted.
      std::vector<std::vector<double>> times;
      for (auto& j : jobs) {
        const Result res = result_of(*j);
        times.push_back(
            token_times(res, std::chrono::duration<double>(*j->started() - t0).count()));
      }
      double from = 0, to = 1e30;
      for (const auto& t : times) from = std::max(from, t.front()), to = std::min(to, t.back());
      if (to <= from)
        fail("tern bench --concurrency: no stretch where all {} decode; raise --gen", n);
      int64_t tokens = 0;
      std::vector<double> gaps;
      for (const auto& t : times)
        for (size_t k = 1; k < t.size(); ++k)
          if (t[k] > from && t[k] <= to) ++tokens, gaps.push_back(t[k] - t[k - 1]);
      const double all = double(tokens) / (to - from);
      const double p50 = percentile(gaps, 0.5), p99 = percentile(gaps, 0.99);
      const double ttft = n > 1 ? ttft_beside(probe, one_more, n - 1, o.seed) : alone;
      std::printf("%9lld %8lld %12.1f %12.1f %9.2fms %9.2fms %8lld %8.1fms %8.2f\n", (long long)ctx,
                  (long long)n, all, all / double(n), p50 * 1e3, p99 * 1e3, (long long)tokens,
                  ttft * 1e3, ttft / alone);
      rows.push_back({{"context", ctx},
                      {"ttft_new_ms", ttft * 1e3},
                      {"ttft_new_vs_alone", ttft / alone},
                      {"streams", n},
                      {"tok_s_aggregate", all},
                      {"tok_s_per_stream", all / double(n)},
                      {"itl_p50_ms", p50 * 1e3},
                      {"itl_p99_ms", p99 * 1e3},
                      {"tokens_measured", tokens}});
    }
  }
  return {{"concurrency", rows}};
}

}  // namespace tern::cli
