// tern serve: the OpenAI-compatible server (server/) over the engine, with the
// session cache. Listens first (/health says 503 while the model loads), then
// loads, then serves until SIGINT or SIGTERM.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "backends/factory.h"
#include "backends/scripted_backend.h"
#include "chat/chat_template.h"
#include "checkpoint/fingerprint.h"
#include "cli/cache_options.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/sizes.h"
#include "cli/stop_signals.h"
#include "core/env.h"
#include "core/error.h"
#include "engine/scheduler.h"
#include "grammar/json_schema.h"
#include "grammar/request.h"
#include "grammar/tokenizer_vocab.h"
#include "server/anthropic_routes.h"
#include "server/http_server.h"
#include "server/openai_routes.h"
#include "server/responses_routes.h"

namespace tern::cli {

namespace {

// The tokenizer's cache of long message texts (their ids): ~200 conversations of 30K tokens.
constexpr size_t kSegmentCacheBytes = size_t(64) << 20;

struct ServeCmd {
  ModelOptions model;
  server::ServeOptions http;
  int64_t ctx_size = 0;
  size_t max_queue = 8;  // parallel + max_queue below --threads: each request holds a worker
  int parallel = 0;      // what the memory allows
  std::string cache_mem = "4G";
  std::string seq_mem = "auto";
  DiskCacheFlags disk;
  int64_t snapshot_every = 4096;
  std::vector<std::string> served_names;
  std::string tokenizer, script, dummy;
  std::string api_key_file;
  int idle_timeout = 30, header_timeout = 10, body_timeout = 60;  // seconds
};

// Requests run at once by default: as many sequences reaching the context's
// end as the budget holds, at most kAutoParallel (and fewer than --threads
// less --max-queue), at least one.
constexpr int kAutoParallel = 8;

// The sequence budget: --seq-mem, or by default under half of what is free
// once the cache has its budget (a KV cache's capacity grows by doubling, so
// sequences may allocate twice what the budget counts). 0: no bound.
size_t sequence_budget(const std::string& flag, const Backend& be, size_t cache_bytes) {
  if (flag != "auto") return parse_size(flag, "--seq-mem");
  const size_t free = be.memory_free();
  if (free == 0) return 0;                                        // unknown
  return free > cache_bytes ? (free - cache_bytes) / 20 * 9 : 1;  // none left: one at a time
}

// The scheduler's gauges: queue, running requests, decode steps by how many
// requests they carried, and the time decoding requests waited for prefill.
void add_scheduler_metrics(server::Metrics& metrics, const Scheduler& scheduler) {
  metrics.gauge("tern_queue_depth", "Requests waiting for the engine.",
                [&] { return double(scheduler.waiting()); });
  metrics.gauge("tern_requests_running", "Requests the engine is running (up to --parallel).",
                [&] { return double(scheduler.running()); });
  metrics.gauge("tern_sequence_bytes",
                "What the running requests' sequences may hold (prompt + max_tokens; --seq-mem).",
                [&] { return double(scheduler.held()); });
  metrics.histogram("tern_step_batch_size", "Requests in each decode step.", [&] {
    const SchedulerStats st = scheduler.stats();
    server::Metrics::HistogramReading h;
    for (size_t r = 1; r < st.steps.size(); ++r) {
      h.bounds.push_back(double(r));
      h.counts.push_back(st.steps[r]);
      h.sum += double(r * st.steps[r]);
    }
    h.counts.push_back(0);  // +Inf: a step carries --parallel requests at most
    return h;
  });
  metrics.counter("tern_prefill_stall_seconds_total",
                  "Seconds decoding requests waited for other requests' prefill calls.",
                  [&] { return scheduler.stats().prefill_stall_seconds; });
}

// --api-key-file's first line (without the line end).
std::string read_api_key(const std::string& path) {
  std::ifstream f(path);
  std::string key;
  if (!f || !std::getline(f, key)) fail("cannot read the API key file {}", path);
  if (!key.empty() && key.back() == '\r') key.pop_back();
  if (key.empty()) fail("the API key file {} starts with an empty line", path);
  return key;
}

// The writes queued when a stop comes: at most the writer's queue (1 GiB).
constexpr std::chrono::seconds kDiskStopBound{10};

void add_disk_metrics(server::Metrics& m, const DiskCache& d, size_t budget) {
  auto stat = [&d](auto field) { return [&d, field] { return double(d.stats().*field); }; };
  m.counter("tern_disk_cache_hits_total", "Requests whose prompt prefix was loaded from disk.",
            stat(&DiskCacheStats::hits));
  m.counter("tern_disk_cache_misses_total",
            "Requests that found no prefix on disk longer than in memory.",
            stat(&DiskCacheStats::misses));
  m.counter("tern_disk_cache_loaded_bytes_total", "Bytes loaded from the disk cache.",
            stat(&DiskCacheStats::loaded_bytes));
  m.counter("tern_disk_cache_load_seconds_total", "Time spent loading from the disk cache.",
            stat(&DiskCacheStats::load_seconds));
  m.counter("tern_disk_cache_writes_total", "Files the disk cache wrote.",
            stat(&DiskCacheStats::writes));
  m.counter("tern_disk_cache_written_bytes_total", "Bytes the disk cache wrote.",
            stat(&DiskCacheStats::written_bytes));
  m.counter("tern_disk_cache_write_seconds_total", "Time the disk cache's writer spent writing.",
            stat(&DiskCacheStats::write_seconds));
  m.counter("tern_disk_cache_dropped_total",
            "Snapshots not written to disk (the writer's queue full, a failed write).",
            stat(&DiskCacheStats::dropped));
  m.counter("tern_disk_cache_removed_total", "Damaged or foreign disk cache entries removed.",
            stat(&DiskCacheStats::removed));
  m.gauge("tern_disk_cache_bytes", "Bytes of the disk cache's files.",
          stat(&DiskCacheStats::bytes));
  m.gauge("tern_disk_cache_budget_bytes", "The disk cache's budget (--cache-disk).",
          [budget] { return double(budget); });
  m.gauge("tern_disk_cache_entries", "Files in the disk cache.", stat(&DiskCacheStats::entries));
  m.gauge("tern_disk_cache_queued", "Snapshots waiting for the disk cache's writer.",
          stat(&DiskCacheStats::queued));
  m.gauge("tern_disk_cache_writing", "1 while the disk cache writes; 0 after a failed write.",
          stat(&DiskCacheStats::writing));
}

// The scripted backend's replies: JSON lines {"trigger": "...", "reply": "..."}.
std::vector<ScriptEntry> read_script(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read the script {}", path);
  std::vector<ScriptEntry> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.value("reply", nlohmann::json()).is_string())
      fail("{}: each line must be {{\"trigger\": ..., \"reply\": ...}}", path);
    out.push_back({j.value("trigger", ""), j["reply"].get<std::string>()});
  }
  return out;
}

int serve(const ServeCmd& o) {
  // What can be checked before listening is: a client never sees a server
  // that will not come up.
  if (o.model.model.empty() == o.dummy.empty()) fail("give exactly one of --model and --dummy");
  if (!o.model.model.empty() && !std::filesystem::is_directory(o.model.model))
    fail("the model folder {} does not exist", o.model.model);
  const std::string tok_dir = o.tokenizer.empty() ? o.model.model : o.tokenizer;
  if (!std::filesystem::exists(std::filesystem::path(tok_dir) / "tokenizer.json"))
    fail("{} has no tokenizer.json (give one with --tokenizer DIR)", tok_dir);

  server::ServeOptions http_options = o.http;
  http_options.limits.idle_timeout = std::chrono::seconds(o.idle_timeout);
  http_options.limits.header_timeout = std::chrono::seconds(o.header_timeout);
  http_options.limits.body_timeout = std::chrono::seconds(o.body_timeout);
  if (!o.api_key_file.empty()) {
    if (!o.http.api_key.empty()) fail("give one of --api-key (or TERN_API_KEY) and --api-key-file");
    http_options.api_key = read_api_key(o.api_key_file);
  }

  std::signal(SIGPIPE, SIG_IGN);
  StopSignals signals;
  server::Metrics metrics;
  server::HttpServer http(http_options, metrics);
  server::ResponseStore responses;
  server::add_openai_routes(http);
  server::add_anthropic_routes(http);
  server::add_responses_routes(http, responses);
  http.start();
  spdlog::info("listening on http://{}:{} (loading {})", o.http.host, http.port(),
               o.dummy.empty() ? o.model.model : "random " + o.dummy + " weights");

  Tokenizer tok = Tokenizer::load(tok_dir);
  if (!is_qwen35_chat_template(tok.chat_template_source()))
    spdlog::warn("the checkpoint's chat template is not Qwen3.5's; tern renders Qwen3.5's");
  std::unique_ptr<Backend> backend;
  if (!o.dummy.empty()) {
    backend = make_dummy_backend(o.model.backend, o.dummy, 1);
  } else {
    std::shared_ptr<ModelWeights> weights = load_weights(o.model);
    backend = o.script.empty()
                  ? make_backend(o.model.backend, weights)
                  : std::make_unique<ScriptedBackend>(weights->cfg, tok, read_script(o.script));
  }
  // Structured outputs: the vocabulary's bytes once; grammars compiled per
  // request (in the HTTP thread that parses it) and cached by schema. Made
  // before the engine: a job's constraint refers to it.
  grammar::GrammarCache grammars(grammar::vocab_of(tok, backend->config().vocab));
  grammar::warm_up(grammars.vocab());  // the JSON string and number positions' masks
  EngineOptions eo;
  eo.cache_bytes = parse_size(o.cache_mem, "--cache-mem");
  eo.snapshot_every = o.snapshot_every;
  eo.ctx_size = o.ctx_size;
  apply_disk_cache(
      o.disk,
      [&] {
        return o.dummy.empty() ? model_fingerprint(o.model.model) + " weights=" + o.model.weights
                               : "dummy " + o.dummy + " seed 1";
      },
      eo);
  Engine engine(*backend, &tok, eo);
  const size_t seq_budget = sequence_budget(o.seq_mem, *backend, eo.cache_bytes);
  const size_t full = engine.sequence_bytes(engine.ctx_size());
  // By default also below what leaves the queue room to fill (each request holds a worker).
  const int most = int(std::clamp<int64_t>(
      int64_t(o.http.limits.workers) - int64_t(o.max_queue) - 1, 1, kAutoParallel));
  const int parallel = o.parallel > 0 ? o.parallel
                       : seq_budget == 0
                           ? most
                           : int(std::clamp<size_t>(seq_budget / full, 1, size_t(most)));
  spdlog::info(
      "sequences: {:.2f} GB for running requests ({}); one at the context's end holds {:.3f} GB",
      double(seq_budget) / 1e9, o.seq_mem == "auto" ? "9/20 of the free memory" : "--seq-mem",
      double(full) / 1e9);
  if (size_t(parallel) + o.max_queue >= size_t(o.http.limits.workers))
    spdlog::warn(
        "--parallel {} and --max-queue {} with --threads {}: the queue never fills, so no 429 is "
        "sent",
        parallel, o.max_queue, o.http.limits.workers);
  Scheduler scheduler(engine, o.max_queue, parallel, seq_budget);
  add_scheduler_metrics(metrics, scheduler);
  metrics.gauge("tern_cache_bytes", "Memory held by the session cache.",
                [&] { return double(engine.cache().bytes()); });
  metrics.gauge("tern_cache_budget_bytes", "The session cache's budget (--cache-mem).",
                [&] { return double(engine.cache().budget()); });
  if (const DiskCache* disk = engine.disk()) add_disk_metrics(metrics, *disk, eo.cache_disk);
  std::vector<std::string> names = o.served_names;
  if (names.empty() || names == std::vector<std::string>{"*"})
    names.insert(names.begin(), o.dummy.empty()
                                    ? std::filesystem::path(o.model.model).filename().string()
                                    : o.dummy);
  tok.cache_segments(kSegmentCacheBytes);  // each turn re-sends the history's text
  http.ready(scheduler, {&tok, names, engine.ctx_size(), &grammars, engine.end_ids()});
  spdlog::info(
      "serving {} on http://{}:{} ({} backend, context {}, {} requests at once, cache {}{})",
      fmt::join(names, ", "), o.http.host, http.port(), backend->name(), engine.ctx_size(),
      parallel, o.cache_mem, eo.cache_dir.empty() ? "" : ", disk cache " + eo.cache_dir);

  signals.loaded();
  const int sig = signals.wait();
  spdlog::info("stopping (signal {})", sig);
  http.stop();  // streams end well-formed, their jobs cancelled
  if (engine.disk()) signals.extend(kDiskStopBound);  // the engine writes what is queued
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with session reuse");
  auto o = std::make_shared<ServeCmd>();
  add_model_options(cmd, o->model, false);
  cmd->add_option("--host", o->http.host, "Address to listen on (loopback by default)");
  cmd->add_option("--port", o->http.port, "Port (0: any free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->http.api_key,
                  "Require this key (Authorization: Bearer or x-api-key); visible to other "
                  "users in the process list: prefer TERN_API_KEY or --api-key-file")
      ->envname(kApiKeyEnv.name);
  cmd->add_option("--api-key-file", o->api_key_file,
                  "Read the key from this file (its first line): unlike --api-key, not visible "
                  "to other users in the process list; so is TERN_API_KEY");
  cmd->add_option("--ctx-size", o->ctx_size, "Prompt + completion tokens at most (0: the model's)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--parallel", o->parallel,
                  "Requests generating at once (continuous batching; each one's output is what "
                  "it would be alone; 0: as many at the context's end as --seq-mem holds, at "
                  "most 8 and fewer than --threads less --max-queue)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--seq-mem", o->seq_mem,
                  "What running requests' sequences may hold together (KV cache and state for "
                  "prompt + max_tokens), e.g. 16G; a request that does not fit waits (auto: "
                  "9/20 of the memory free after the cache's budget)");
  cmd->add_option("--max-queue", o->max_queue, "Requests waiting at most (then 429)")
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  cmd->add_option("--cache-mem", o->cache_mem, "Session cache budget, e.g. 4G, 512M (0: no reuse)");
  add_disk_cache_options(cmd, o->disk);
  cmd->add_option("--snapshot-every", o->snapshot_every,
                  "Snapshot the state every N prompt tokens inside long prompts (0: never)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--served-model-name", o->served_names,
                  "Model name in the API (default: the folder's); repeatable for aliases, '*' "
                  "answers any name (reporting the asked one back)");
  cmd->add_option(
      "--cors-origin", o->http.cors_origins,
      "Allow browser requests from this origin beyond loopback ones (repeatable; * for any)");
  cmd->add_option("--threads", o->http.limits.workers,
                  "Threads answering requests (reading and writing them takes none)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-connections", o->http.limits.max_connections,
                  "Open connections at most (then the oldest idle or slow one is closed)")
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--max-client-connections", o->http.limits.max_client_connections,
                  "Open connections from one address at most (likewise)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--idle-timeout", o->idle_timeout,
                  "Seconds a keep-alive connection may wait for its next request")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--header-timeout", o->header_timeout,
                  "Seconds a request's head may take to arrive, from its first byte")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--body-timeout", o->body_timeout,
                  "Seconds a request's body may take to arrive, after its head")
      ->check(CLI::Range(1, 3600));
  cmd->add_flag("!--no-idle-prefill", o->http.idle_prefill,
                "Do not prefill a chat's likely next turn (its answer as history and the next "
                "message's start) while idle");
  cmd->add_option("--max-body", o->http.limits.max_body, "Largest request body in bytes (then 413)")
      ->check(CLI::Range(size_t(1024), size_t(1) << 32));
  cmd->add_option("--tokenizer", o->tokenizer, "Folder with tokenizer.json (default: --model)");
  cmd->add_option("--dummy", o->dummy,
                  "Benchmarks: random weights of a preset (35b-a3b) made on the GPU, no --model "
                  "checkpoint (needs --tokenizer)");
  cmd->add_option("--script", o->script,
                  "Testing: replay replies from this JSONL file instead of running the model");
  return [o] { return serve(*o); };
}

}  // namespace tern::cli
