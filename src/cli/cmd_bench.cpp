// tern bench: prompt processing (--prefill N,...: forward() of N random tokens
// to the last token's logits, any backend) and decode (--decode L,...: greedy
// steps after a context of L tokens) speed. Per length the median over
// repeats of tok/s and ms/token; for decode also the bytes moved per token,
// the achieved GB/s and the fraction of the floor (bytes / copy bandwidth
// measured in the same run). CUDA: the context is synthetic (random KV cache
// and state, untimed), decode may use the GPU sampler (--sample), and the run
// reports the launch overhead of a graph of as many empty kernels as the step
// has; its prompt processing (bench_prefill.cpp) also reports TFLOP/s, the
// fraction of the bf16 matrix rate and, with --split, the time per phase.
// CPU (cpu, cpu-ref): the context is a prefill of random tokens
// (untimed), the copy bandwidth a multi-threaded memcpy over buffers far
// larger than L3, measured at the start and again after each decode row
// (that row's floor); --split times decode's parts (fast backend); --isa
// runs each row once per kernel table named, in turn, over the same weights
// (the fast backend). --restore (any backend, bench_restore.cpp): loading a
// prompt's state from the disk cache against prefilling it. Table on stdout,
// JSON and a plot (SVG or PNG) on request.
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "backends/cpu/fast_backend.h"
#include "backends/cpu/memory_bandwidth.h"
#include "backends/cuda/leave_out.h"
#include "backends/factory.h"
#include "cli/bench_concurrency.h"
#include "cli/bench_prefill.h"
#include "cli/bench_restore.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/plot.h"
#include "core/error.h"
#include "core/thread_pool.h"
#ifdef TERN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_bench.h"
#endif

namespace tern::cli {

namespace {

#ifdef TERN_HAVE_CUDA
constexpr const char* kDefaultBackend = "cuda";
#else
constexpr const char* kDefaultBackend = "cpu";
#endif

struct BenchOptions {
  std::string model, dummy, backend = kDefaultBackend, decode, prefill, json, plot, rev, trace;
  std::string restore, cache_dir, concurrency, isa;
  int gen = 128, repeat = 3;
  uint64_t seed = 1;
  bool sample = false, mmap = false;
  std::vector<std::string> leave_out;
  std::string command;
  // --split (CUDA prompt phases, CPU decode parts), the CUDA prefill options (0: default).
  bool split = false;
  int prefill_chunk = 0, chunked_from = 0, moe_bn = 0, dense_bn = 0, gemm_bm = 0, moe_bm = 0,
      step_below = 0;
};

// The lengths asked for; decode at 256..4096 when neither flag is given.
struct Lengths {
  std::vector<int64_t> prefill, decode, restore, concurrency;
};

Lengths parse_bench_lengths(const BenchOptions& o) {
  Lengths l;
  if (!o.prefill.empty()) l.prefill = parse_lengths(o.prefill, "--prefill");
  if (!o.restore.empty()) {
    if (!o.prefill.empty() || !o.decode.empty())
      fail("tern bench: --restore runs alone (no --prefill or --decode)");
    l.restore = parse_lengths(o.restore, "--restore");
    return l;
  }
  if (!o.concurrency.empty()) {
    if (!o.prefill.empty())
      fail("tern bench: --concurrency takes --decode's contexts, not --prefill");
    l.concurrency = parse_lengths(o.concurrency, "--concurrency");
    l.decode = parse_lengths(o.decode.empty() ? "4096" : o.decode, "--decode");
    return l;
  }
  if (!o.decode.empty() || o.prefill.empty())
    l.decode = parse_lengths(o.decode.empty() ? "256,512,1024,2048,4096" : o.decode, "--decode");
  return l;
}

const char* kDecodeHeader = "%9s %10s %9s %10s %9s %10s %8s\n";

void print_decode_header() {
  std::printf(kDecodeHeader, "context", "tok/s", "ms/tok", "MB/tok", "GB/s", "floor", "of floor");
}

// One decode row: printed, and as JSON (the CUDA and CPU benches write the
// same keys; backends may add their own).
nlohmann::json decode_row(int64_t L, const std::vector<double>& secs, int gen, double bytes,
                          double copy_bw, std::vector<PlotPoint>& points) {
  const double t = median(secs) / gen, tok_s = 1.0 / t, floor_tok_s = copy_bw / bytes;
  std::printf("%9lld %10.2f %9.3f %10.1f %9.1f %10.2f %7.1f%%\n", (long long)L, tok_s, t * 1e3,
              bytes / 1e6, bytes * tok_s / 1e9, floor_tok_s, 100 * tok_s / floor_tok_s);
  std::fflush(stdout);
  points.push_back({double(L), tok_s, floor_tok_s});
  return {{"context", L},
          {"tok_s", tok_s},
          {"ms_per_token", t * 1e3},
          {"bytes_per_token", bytes},
          {"gb_s", bytes * tok_s / 1e9},
          {"floor_tok_s", floor_tok_s},
          {"fraction_of_floor", tok_s / floor_tok_s},
          {"seconds_per_repeat", secs}};
}

// One prompt-processing row, timed over the Backend interface.
nlohmann::json prefill_row(Backend& b, int64_t n, int repeat, uint64_t seed) {
  const std::vector<double> secs = time_prefill(b, n, repeat, seed + uint64_t(n));
  const double s = median(secs);
  std::printf("%9lld %10.2f %10.3f", (long long)n, double(n) / s, s);
  return {{"tokens", n}, {"tok_s", double(n) / s}, {"seconds", s}, {"seconds_per_repeat", secs}};
}

// GDN recurrent and conv state read and written per decode token (fp32 here
// and on the GPU).
size_t gdn_state_bytes(const ModelConfig& c) {
  return size_t(c.n_linear_layers()) * (2 * size_t(c.lin_v_heads) * c.lin_k_dim * c.lin_v_dim * 4 +
                                        2 * size_t(c.conv_kernel - 1) * c.conv_channels() * 4);
}

// `prefill_plotted`: --plot's prefill plot is drawn already (CUDA).
void write_outputs(const BenchOptions& o, const nlohmann::json& j,
                   const std::vector<PlotPoint>& points, bool prefill_plotted = false) {
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    if (!f) fail("cannot write {}", o.json);
    f << j.dump(2) << "\n";
  }
  if (!o.plot.empty()) {
    if (!points.empty())
      write_decode_plot(o.plot, points);
    else if (!prefill_plotted)
      fail("tern bench: --plot draws decode speed here: give --decode lengths");
  }
}

// One more decode run at context L with the forward pass's parts timed:
// ms a token each, and what the whole tokens took beside their sum.
nlohmann::json cpu_decode_split(FastCpuBackend& be, int64_t L, int gen, uint64_t seed) {
  cpu::PartTimes t;
  be.set_part_times(&t);
  const double whole = time_cpu_decode(be, L, gen, 1, seed).front() / gen;
  be.set_part_times(nullptr);
  nlohmann::json j = {{"whole_ms", whole * 1e3}};
  std::printf("  split at %lld (ms a token):", (long long)L);
  double sum = 0;
  for (int p = 0; p < int(cpu::Part::count); ++p) {
    const double ms = t.seconds[p] / gen * 1e3;
    sum += ms;
    j[cpu::kPartNames[p]] = ms;
    std::printf(" %s %.2f", cpu::kPartNames[p], ms);
  }
  std::printf("; sum %.2f of %.2f whole\n", sum, whole * 1e3);
  return j;
}

// The kernel tables --isa names, in its order (none: the one the fast backend
// picks, TERN_CPU_ISA or the widest the CPU has).
std::vector<cpu::Isa> bench_isas(const std::string& list) {
  if (list.empty()) return {cpu::default_isa()};
  std::vector<cpu::Isa> isas;
  std::istringstream in(list);
  for (std::string name; std::getline(in, name, ',');)
    isas.push_back(cpu::supported_isa(name, "tern bench --isa"));
  return isas;
}

// The CPU backends: a checkpoint from disk, the context prefilled; the fast
// backend once per kernel table asked for, each row timed on each in turn.
int run_cpu_bench(const BenchOptions& o, const Lengths& lengths) {
  if (!o.dummy.empty())
    fail(
        "tern bench --backend {}: --dummy makes random weights on the GPU; write a dummy once "
        "(tern make-dummy --preset {} --layout mlx4 --seed 1 --out DIR) and pass --model DIR",
        o.backend, o.dummy);
  if (o.model.empty()) fail("tern bench: give --model");
  if (o.sample || !o.leave_out.empty() || !o.trace.empty() || o.prefill_chunk || o.chunked_from ||
      o.moe_bn || o.dense_bn || o.gemm_bm || o.moe_bm || o.step_below)
    fail(
        "tern bench: --sample, --leave-out, --trace and the prefill tile options are for the CUDA "
        "backend");
  const bool fast = o.backend == "cpu";
  if (!fast && (o.split || !o.isa.empty()))
    fail("tern bench: --split and --isa are for the fast CPU backend (--backend cpu)");
  if (o.split && lengths.decode.empty())
    fail("tern bench: --split on the CPU times decode's parts (--decode)");
  const std::vector<cpu::Isa> tables = fast ? bench_isas(o.isa) : std::vector<cpu::Isa>{};
  auto w = load_model(o.model, WeightMode::q4, cli::residency_for(o.backend, o.mmap));
  prepare_weights(o.backend, *w);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::string> isas;
  if (fast) {
    for (cpu::Isa i : tables) {
      backends.push_back(std::make_unique<FastCpuBackend>(w, i));
      isas.push_back(cpu::isa_name(i));
    }
  } else {
    backends.push_back(make_backend(o.backend, w));
    isas.push_back("fp32 reference");
  }
  const std::string isa = fmt::format("{}", fmt::join(isas, ","));
  const ModelConfig& c = w->cfg;
  const int threads = ThreadPool::global().size();
  const cpu::MemoryBandwidth bw = cpu::measure_memory_bandwidth(ThreadPool::global());
  const size_t weights = w->active_bytes_per_token(), gdn_state = gdn_state_bytes(c);
  const size_t kv_per_pos = size_t(c.n_full_layers()) * 2 * c.n_kv_heads * c.head_dim * 4;
  std::printf(
      "backend %s (%s), %d threads; copy bandwidth %.1f GB/s (read + write), read %.1f GB/s; "
      "weights read per token %.1f MB\n",
      o.backend.c_str(), isa.c_str(), threads, bw.copy / 1e9, bw.read / 1e9, weights / 1e6);
  nlohmann::json prefill = nlohmann::json::array();
  if (!lengths.prefill.empty())
    std::printf("%-8s %9s %10s %10s\n", "isa", "prompt", "tok/s", "seconds");
  for (int64_t n : lengths.prefill)
    for (size_t i = 0; i < backends.size(); ++i) {
      std::printf("%-8s ", isas[i].c_str());
      nlohmann::json row = prefill_row(*backends[i], n, o.repeat, o.seed);
      std::printf("\n");
      std::fflush(stdout);
      row["isa"] = isas[i];
      prefill.push_back(row);
    }
  nlohmann::json rows = nlohmann::json::array();
  std::vector<PlotPoint> points, unplotted;  // the plot: the first table's rows
  if (!lengths.decode.empty()) {
    std::printf("%-8s ", "isa");
    print_decode_header();
  }
  for (int64_t L : lengths.decode)
    for (size_t i = 0; i < backends.size(); ++i) {
      const std::vector<double> secs =
          time_cpu_decode(*backends[i], L, o.gen, o.repeat, o.seed + 7 * L);
      // Measured again right after the row: a shared VM's bandwidth drifts by
      // 2x within minutes (docs/cpu-backend.md), and the floor is this row's.
      const cpu::MemoryBandwidth row_bw = cpu::measure_memory_bandwidth(ThreadPool::global());
      const double bytes =
          double(weights + gdn_state) + double(kv_per_pos) * (double(L) + o.gen / 2.0);
      std::printf("%-8s ", isas[i].c_str());
      nlohmann::json row =
          decode_row(L, secs, o.gen, bytes, row_bw.copy, i == 0 ? points : unplotted);
      row["isa"] = isas[i];
      row["weight_gb_s"] = double(weights) / (median(secs) / o.gen) / 1e9;
      row["copy_bandwidth_gb_s"] = row_bw.copy / 1e9;
      row["read_bandwidth_gb_s"] = row_bw.read / 1e9;
      row["fraction_of_read_floor"] = double(row["tok_s"]) * bytes / row_bw.read;
      if (o.split)
        row["split"] =
            cpu_decode_split(dynamic_cast<FastCpuBackend&>(*backends[i]), L, o.gen, o.seed + 7 * L);
      rows.push_back(row);
    }
  const nlohmann::json j = {{"command", o.command},
                            {"git_revision", o.rev},
                            {"backend", o.backend},
                            {"isa", isa},
                            {"threads", threads},
                            {"model", o.model},
                            {"gen", o.gen},
                            {"repeat", o.repeat},
                            {"token_choice", "greedy"},
                            {"context_fill", "prefill of random tokens, untimed"},
                            {"copy_bandwidth_gb_s", bw.copy / 1e9},
                            {"read_bandwidth_gb_s", bw.read / 1e9},
                            {"weight_bytes_per_token", weights},
                            {"gdn_state_bytes_per_token", gdn_state},
                            {"kv_bytes_per_position", kv_per_pos},
                            {"prefill", prefill},
                            {"decode", rows}};
  write_outputs(o, j, points);
  return 0;
}

#ifdef TERN_HAVE_CUDA
// The line that says the step's timing lacks the --leave-out kernels.
void print_left_out(const BenchOptions& o) {
  if (!o.leave_out.empty())
    fmt::print("left out of the step (timing only, the tokens are not the model's): {}\n",
               fmt::join(o.leave_out, ","));
}

// One line per traced block (cuda::TraceRecord).
void write_trace(const std::string& path, const std::vector<cuda::TraceRecord>& recs) {
  std::ofstream f(path);
  if (!f) fail("tern bench: cannot write {}", path);
  f << "start_ns,kind,block,sm,ended";
  for (const char* m : cuda::kTraceMarkNames) f << ',' << m;
  f << '\n';
  for (const cuda::TraceRecord& r : recs) {
    f << r.start_ns << ',' << r.kind << ',' << r.block << ',' << r.sm << ',' << r.ended;
    for (const uint32_t m : r.mark) f << ',' << m;
    f << '\n';
  }
  std::printf("trace: %zu block records in %s\n", recs.size(), path.c_str());
}
#endif

#ifdef TERN_HAVE_CUDA
// Where --plot's prefill plot goes: the path itself, or beside the decode
// plot (NAME-prefill.svg) when both run.
std::string prefill_plot_path(const std::string& plot, bool with_decode) {
  if (plot.empty() || !with_decode) return plot;
  const size_t dot = plot.rfind('.');
  return plot.substr(0, dot) + "-prefill" + plot.substr(dot);
}

int run_cuda_bench(const BenchOptions& o, const Lengths& l) {
  if (o.model.empty() == o.dummy.empty())
    fail("tern bench: give exactly one of --model and --dummy");
  std::unique_ptr<cuda::CudaBackend> be;
  if (!o.dummy.empty()) {
    ModelConfig cfg = parse_config(preset_config(o.dummy), "preset " + o.dummy);
    be = std::make_unique<cuda::CudaBackend>(cuda::DeviceWeights::random(cfg, o.seed));
  } else {
    be = std::make_unique<cuda::CudaBackend>(load_model(o.model, WeightMode::q4));
  }
  cuda::CudaBench bench(*be);
  bench.leave_out({o.leave_out.begin(), o.leave_out.end()});
  cuda::PrefillOptions po;
  if (o.prefill_chunk > 0) po.chunk = o.prefill_chunk;
  if (o.chunked_from > 0) po.chunked_from = o.chunked_from;
  if (o.step_below > 0) po.step_below = o.step_below;
  po.moe_bn = o.moe_bn, po.dense_bn = o.dense_bn;
  if (o.gemm_bm > 0) po.gemm_bm = o.gemm_bm;
  if (o.moe_bm > 0) po.moe_bm = o.moe_bm;
  be->set_prefill_options(po);
  nlohmann::json prefill;
  if (!l.prefill.empty())
    prefill = run_prefill_bench(*be, {.lengths = l.prefill,
                                      .repeat = o.repeat,
                                      .seed = o.seed,
                                      .split = o.split,
                                      .plot = prefill_plot_path(o.plot, !l.decode.empty())});
  const ModelConfig& c = be->config();
  const double copy_bw = cuda::copy_bandwidth();
  auto seq = be->new_sequence();
  const int64_t max_len =
      (l.decode.empty() ? 0 : *std::max_element(l.decode.begin(), l.decode.end())) + o.gen + 2;
  bench.reserve(*seq, max_len);
  const SamplingParams sampling = o.sample ? chat_sampling(o.seed) : SamplingParams{};
  be->start_sampling(*seq, sampling, {});
  const std::string choice =
      o.sample ? "sampler (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repetition 1.1)"
               : "greedy (arg-max)";

  const size_t weights = bench.weights().active_bytes_per_token(), gdn_state = gdn_state_bytes(c);
  const size_t kv_per_pos = size_t(c.n_full_layers()) * 2 * c.n_kv_heads * c.head_dim * 2;
  std::printf(
      "copy bandwidth %.0f GB/s; weights read per token %.1f MB; device memory in use %.2f GB\n",
      copy_bw / 1e9, weights / 1e6, double(cuda::device_memory_used()) / 1e9);
  std::printf("token choice: %s\n", choice.c_str());
  print_left_out(o);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<PlotPoint> points;
  if (!l.decode.empty()) print_decode_header();
  for (int64_t L : l.decode) {
    bench.fill_synthetic(*seq, L, o.seed + uint64_t(L));
    std::vector<double> secs;
    for (int r = 0; r < o.repeat; ++r) {
      bench.set_length(*seq, L);
      secs.push_back(bench.time_steps(*seq, o.gen));
    }
    const double bytes =
        double(weights + gdn_state) + double(kv_per_pos) * (double(L) + o.gen / 2.0);
    rows.push_back(decode_row(L, secs, o.gen, bytes, copy_bw, points));
    if (!o.trace.empty() && L == l.decode.front()) {
      bench.set_length(*seq, L);
      write_trace(o.trace, bench.trace_steps(*seq, 2));
    }
  }
  const int kernels = bench.step_kernels(*seq);
  const double launch_us = cuda::launch_overhead(kernels) * 1e6;
  std::printf("launch overhead: %.1f us per step of %d empty kernels (%.2f us per kernel)\n",
              launch_us, kernels, launch_us / kernels);
  const size_t mem = cuda::device_memory_used();
  std::printf("device memory in use at the end: %.2f GB\n", double(mem) / 1e9);
  nlohmann::json j = {{"command", o.command},
                      {"git_revision", o.rev},
                      {"backend", "cuda"},
                      {"model", o.dummy.empty() ? o.model : "dummy " + o.dummy},
                      {"gen", o.gen},
                      {"token_choice", o.sample ? "sample" : "greedy"},
                      {"token_choice_detail", choice},
                      {"kernels_per_step", kernels},
                      {"left_out", o.leave_out},
                      {"launch_overhead_us_per_step", launch_us},
                      {"launch_overhead_us_per_kernel", launch_us / kernels},
                      {"repeat", o.repeat},
                      {"context_fill", "synthetic (random bf16 KV cache and GDN state), untimed"},
                      {"copy_bandwidth_gb_s", copy_bw / 1e9},
                      {"weight_bytes_per_token", weights},
                      {"gdn_state_bytes_per_token", gdn_state},
                      {"kv_bytes_per_position", kv_per_pos},
                      {"weights_on_device_bytes", bench.weights().total_bytes()},
                      {"device_memory_used_bytes", mem},
                      {"decode", rows}};
  if (!prefill.is_null()) j.update(prefill);
  write_outputs(o, j, points, !l.prefill.empty());
  return 0;
}
#endif

// The backend of --restore and --concurrency: a checkpoint, or (CUDA) random weights.
std::unique_ptr<Backend> engine_bench_backend(const BenchOptions& o, const char* flag) {
  if (o.model.empty() == o.dummy.empty())
    fail("tern bench: give exactly one of --model and --dummy");
  if (!o.plot.empty()) fail("tern bench: --plot draws decode or prefill speed, not {}'s", flag);
  if (!o.dummy.empty()) return make_dummy_backend(o.backend, o.dummy, o.seed);
  auto w = load_model(o.model, WeightMode::q4, cli::residency_for(o.backend, o.mmap));
  prepare_weights(o.backend, *w);
  return make_backend(o.backend, w);
}

nlohmann::json engine_bench_json(const BenchOptions& o, const Backend& be) {
  return {{"command", o.command},
          {"git_revision", o.rev},
          {"backend", o.backend},
          {"numerics", be.numerics_id()},
          {"model", o.dummy.empty() ? o.model : "dummy " + o.dummy}};
}

int run_restore(const BenchOptions& o, const std::vector<int64_t>& lengths) {
  auto be = engine_bench_backend(o, "--restore");
  std::printf("backend %s (%s); loads from the disk cache against prefill\n", o.backend.c_str(),
              be->numerics_id().c_str());
  nlohmann::json j = engine_bench_json(o, *be);
  j.update(run_restore_bench(
      *be, {.lengths = lengths, .repeat = o.repeat, .seed = o.seed, .dir = o.cache_dir}));
  write_outputs(o, j, {});
  return 0;
}

int run_concurrency(const BenchOptions& o, const Lengths& l) {
  auto be = engine_bench_backend(o, "--concurrency");
  std::printf("backend %s (%s); requests decoding at once\n", o.backend.c_str(),
              be->numerics_id().c_str());
  if (!o.leave_out.empty()) {
#ifdef TERN_HAVE_CUDA
    auto* gpu = dynamic_cast<cuda::CudaBackend*>(be.get());
    if (gpu == nullptr) fail("tern bench: --leave-out is for the CUDA backend");
    cuda::CudaBench(*gpu).leave_out({o.leave_out.begin(), o.leave_out.end()});
    print_left_out(o);
#else
    fail("tern bench: --leave-out is for the CUDA backend");
#endif
  }
  nlohmann::json j = engine_bench_json(o, *be);
  j.update(run_concurrency_bench(
      *be, {.streams = l.concurrency, .contexts = l.decode, .gen = o.gen, .seed = o.seed}));
  write_outputs(o, j, {});
  return 0;
}

int run_bench(const BenchOptions& o) {
  cuda::check_step_kernel_names({o.leave_out.begin(), o.leave_out.end()});
  const Lengths lengths = parse_bench_lengths(o);  // before the weights are made
  if (!lengths.restore.empty()) return run_restore(o, lengths.restore);
  if (!lengths.concurrency.empty()) return run_concurrency(o, lengths);
  if (o.backend != "cuda") return run_cpu_bench(o, lengths);
#ifdef TERN_HAVE_CUDA
  return run_cuda_bench(o, lengths);
#else
  fail("tern bench --backend cuda: the CUDA backend is not built into this tern");
#endif
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Prompt and decode speed by length (CPU or CUDA)");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--model", o->model, "Checkpoint folder");
  cli::add_mmap_flag(cmd, o->mmap);
  cmd->add_option("--dummy", o->dummy,
                  "Random weights of a preset shape, made on the GPU (35b-a3b, tiny; CUDA only)");
  cmd->add_option("--backend", o->backend,
                  fmt::format("cpu (fast), cpu-ref (the fp32 reference) or cuda (default {})",
                              kDefaultBackend))
      ->check(CLI::IsMember({"cpu", "cpu-ref", "cuda"}));
  cmd->add_option("--decode", o->decode,
                  "Comma-separated context lengths to time decode after (default "
                  "256,512,1024,2048,4096 when --prefill is not given)");
  cmd->add_option("--prefill", o->prefill,
                  "Comma-separated prompt lengths to time: forward() of that many random tokens "
                  "to the last token's logits");
  cmd->add_option("--restore", o->restore,
                  "Comma-separated prompt lengths: prefill against loading the state back from "
                  "the disk cache (any backend; runs alone)");
  cmd->add_option("--concurrency", o->concurrency,
                  "Comma-separated request counts decoding at once through the scheduler, at "
                  "--decode's contexts (default 4096), --gen tokens each (any backend)");
  cmd->add_option("--cache-dir", o->cache_dir,
                  "--restore: where its entries go (a subdirectory made and removed; default "
                  "$TMPDIR)");
  cmd->add_option("--gen", o->gen, "Timed decode tokens per repeat")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd->add_option("--repeat", o->repeat, "Repeats (the median is reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd->add_option("--json", o->json, "Write the results as JSON");
  cmd->add_option("--plot", o->plot,
                  "Write tok/s against context as SVG or PNG (by the file's extension)")
      ->check([](const std::string& path) {
        try {
          plot_format(path);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
  cmd->add_option("--seed", o->seed, "Seed of the random weights, contexts and sampler");
  cmd->add_flag("--sample", o->sample,
                "Time decode with the GPU sampler (temperature 0.8, top-k 40, top-p 0.95, "
                "min-p 0.05, repetition penalty 1.1) instead of greedy");
  cmd->add_option("--trace", o->trace,
                  "CSV of per-block timestamps of two steps at the first --decode length (a tern "
                  "built with -DTERN_TRACE=ON; bench/device/trace_summary.py reads it)");
  cmd->add_option("--leave-out", o->leave_out,
                  fmt::format("Step kernels to leave out, comma-separated ({}): the step time "
                              "without them, for a per-kernel breakdown",
                              fmt::join(cuda::step_kernel_names(), ", ")))
      ->delimiter(',');
  cmd->add_option("--rev", o->rev, "Git revision recorded in the JSON");
  cmd->add_option("--isa", o->isa,
                  "CPU: comma-separated kernel tables (portable, avx2, avxvnni, avx512, amx) to "
                  "time each row on in turn, over the same weights (default: the one "
                  "TERN_CPU_ISA or the CPU picks)");
  cmd->add_flag("--split", o->split,
                "CUDA, with --prefill: one more run per length timing each phase (MoE GEMMs, "
                "dense GEMMs, GDN, attention, the rest) next to its FLOP floor; CPU, with "
                "--decode: one more run per length timing each part of the token (norms, GDN, "
                "attention, MoE, output head)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "CUDA: most tokens a prefill chunk")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gdn-chunked-from", o->chunked_from,
                  "CUDA: chunk length from which GDN runs the chunked (WY) form, not the scan")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--moe-bn", o->moe_bn,
                  "CUDA: grouped MoE GEMM tile, 16/32/48/64/96/128 (0: auto; 48 and 96 with "
                  "--moe-bm 128)")
      ->check(CLI::IsMember({0, 16, 32, 48, 64, 96, 128}));
  cmd->add_option("--dense-bn", o->dense_bn, "CUDA: dense GEMM tile, 16/32/64/128 (0: auto)")
      ->check(CLI::IsMember({0, 16, 32, 64, 128}));
  cmd->add_option("--prefill-step-below", o->step_below,
                  "CUDA: calls of fewer tokens run the decode step token by token")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gemm-bm", o->gemm_bm,
                  "CUDA: dense GEMM weight rows a tile, 128 or 256 (0: auto)")
      ->check(CLI::IsMember({0, 128, 256}));
  cmd->add_option("--moe-bm", o->moe_bm,
                  "CUDA: grouped MoE GEMM weight rows a tile, 128 or 256 (0: auto)")
      ->check(CLI::IsMember({0, 128, 256}));
  return [o, cmd] {
    o->command = "tern bench";
    for (const auto& s : cmd->remaining(true)) o->command += " " + s;
    for (const CLI::Option* opt : cmd->get_options())
      if (opt->count() > 0 && !opt->get_lnames().empty() && opt->get_lnames()[0] != "help")
        o->command += " --" + opt->get_lnames()[0] +
                      (opt->get_expected_max() == 0 ? "" : " " + opt->as<std::string>());
    return run_bench(*o);
  };
}

}  // namespace tern::cli
