#include "cli/bench_restore.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/bench_timing.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/engine.h"

namespace tern::cli {

namespace {

namespace fs = std::filesystem;

// Writes the files' pages out and drops them from the page cache.
void drop_page_cache(const std::string& dir) {
  for (const auto& d : fs::directory_iterator(dir)) {
    const int fd = ::open(d.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct Run {
  Result res;
  std::vector<int32_t> tokens;  // what it generated
  DiskCacheStats disk;          // after its writes
};

// The prompt on a new engine (empty memory) over the disk tier.
Run run(Backend& be, const EngineOptions& eo, const std::vector<int32_t>& prompt) {
  Engine e(be, nullptr, eo);
  Request r;
  r.prompt = prompt;
  r.max_tokens = 4;
  r.ignore_eos = true;
  r.logprobs = 0;
  r.output = Request::Output::text;
  Run out;
  out.res = e.run(r, [&](Delta&& d) {
    for (const TokenLogprob& l : d.logprobs) out.tokens.push_back(l.token);
  });
  if (e.disk()) {
    e.disk()->flush();
    out.disk = e.disk()->stats();
  }
  return out;
}

}  // namespace

nlohmann::json run_restore_bench(Backend& be, const RestoreBenchOptions& o) {
  const fs::path base = o.dir.empty() ? fs::temp_directory_path() : fs::path(o.dir);
  const std::string dir = (base / ("tern-restore-bench-" + std::to_string(getpid()))).string();
  std::printf("%9s %11s %11s %11s %11s %11s %11s %11s %10s\n", "tokens", "prefill s", "ms/1K",
              "+disk s", "load s", "ms/1K", "cold s", "ms/1K", "MB/1K");
  nlohmann::json rows = nlohmann::json::array();
  EngineOptions plain;
  plain.cache_bytes = 0;
  run(be, plain, std::vector<int32_t>(64, 1));  // untimed: a process's first calls fault buffers in
  for (int64_t n : o.lengths) {
    fs::remove_all(dir);
    CounterRng rng(o.seed + uint64_t(n));
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int32_t& t : prompt) t = int32_t(rng.next_u64() % uint64_t(be.config().vocab));
    EngineOptions eo = plain;  // the repeats have only the disk
    eo.cache_dir = dir;
    eo.cache_disk = size_t(1) << 40;
    eo.model_id = "bench";
    const double prefill = run(be, plain, prompt).res.prefill_s;
    const Run first = run(be, eo, prompt);
    std::vector<double> warm, cold;
    for (int i = 0; i < o.repeat; ++i) {
      for (std::vector<double>* times : {&warm, &cold}) {
        if (times == &cold) drop_page_cache(dir);
        const Run again = run(be, eo, prompt);
        if (again.res.disk_tokens != n - 1 || again.tokens != first.tokens)
          fail("the repeat of {} tokens loaded {} from disk and generated other tokens", n,
               again.res.disk_tokens);
        times->push_back(again.res.prefill_s);
      }
    }
    const double k = double(n) / 1000;
    const double load = median(warm), load_cold = median(cold);
    const uint64_t bytes = first.disk.bytes;
    std::printf("%9lld %11.3f %11.2f %11.3f %11.4f %11.2f %11.4f %11.2f %10.2f\n", (long long)n,
                prefill, prefill / k * 1e3, first.res.prefill_s, load, load / k * 1e3, load_cold,
                load_cold / k * 1e3, double(bytes) / 1e6 / k);
    std::fflush(stdout);
    rows.push_back({{"tokens", n},
                    {"prefill_seconds", prefill},
                    {"prefill_ms_per_1k", prefill / k * 1e3},
                    {"prefill_with_disk_seconds", first.res.prefill_s},
                    {"load_seconds", load},
                    {"load_ms_per_1k", load / k * 1e3},
                    {"load_cold_seconds", load_cold},
                    {"load_cold_ms_per_1k", load_cold / k * 1e3},
                    {"load_seconds_per_repeat", warm},
                    {"load_cold_seconds_per_repeat", cold},
                    {"disk_bytes", bytes},
                    {"write_seconds", first.disk.write_seconds}});
  }
  fs::remove_all(dir);
  return {{"restore", rows}, {"restore_dir", base.string()}};
}

}  // namespace tern::cli
