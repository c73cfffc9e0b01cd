#include "cli/bench_concurrency.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "engine/scheduler.h"

namespace tern::cli {

namespace {

// When each generated token came, in seconds from the request's start.
std::vector<double> token_times(const Result& r) {
  std::vector<double> t;
  if (r.completion_tokens == 0) return t;
  t.push_back(r.ttft_s);
  for (float g : r.token_gaps) t.push_back(t.back() + g);
  return t;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

nlohmann::json run_concurrency_bench(Backend& be, const ConcurrencyBenchOptions& o) {
  std::printf("%9s %8s %12s %12s %10s %10s %8s\n", "context", "streams", "tok/s all", "tok/s each",
              "itl p50", "itl p99", "tokens");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t ctx : o.contexts) {
    for (int64_t n : o.streams) {
      EngineOptions eo;
      eo.cache_bytes = 0;
      Engine engine(be, nullptr, eo);
      Scheduler sched(engine, size_t(n), int(n));
      std::vector<std::shared_ptr<Job>> jobs;
      for (int64_t i = 0; i < n; ++i) {
        CounterRng rng(o.seed + uint64_t(ctx * 131 + i));
        Request r;
        r.prompt.resize(size_t(ctx));
        for (int32_t& t : r.prompt) t = int32_t(rng.next_u64() % uint64_t(be.config().vocab));
        r.max_tokens = o.gen;
        r.ignore_eos = true;
        r.output = Request::Output::text;
        jobs.push_back(sched.submit(std::move(r)));
      }
      // Every request starts together (parallel = n), so their clocks agree.
      std::vector<std::vector<double>> times;
      for (auto& j : jobs) {
        for (;;) {
          auto e = j->next(std::chrono::milliseconds(100));
          if (!e || e->delta) continue;
          if (!e->result) fail("tern bench --concurrency: {}", e->error);
          times.push_back(token_times(*e->result));
          break;
        }
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
      std::printf("%9lld %8lld %12.1f %12.1f %9.2fms %9.2fms %8lld\n", (long long)ctx, (long long)n,
                  all, all / double(n), p50 * 1e3, p99 * 1e3, (long long)tokens);
      rows.push_back({{"context", ctx},
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
