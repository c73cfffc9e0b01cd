// tern bench (decode part; --prefill is bench_prefill.cpp): for each context
// length, fill the context (untimed, synthetic KV cache and state), then
// time decode steps (greedy, or the GPU sampler with --sample); report the
// median over repeats of tok/s and ms/token, bytes moved per token, achieved
// GB/s and the fraction of the roofline floor (bytes / device-to-device copy
// bandwidth measured in the same run), and the launch overhead of a graph of
// as many empty kernels as the step has. Table on stdout, JSON and a plot (SVG
// or PNG) on request.
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/cuda/step_kernels.h"
#include "cli/bench_prefill.h"
#include "cli/commands.h"
#include "cli/plot.h"
#include "core/error.h"
#include "engine/backend.h"
#ifdef TERN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace tern::cli {

namespace {

struct BenchOptions {
  std::string model, dummy, backend = "cuda", decode = "256,512,1024,2048,4096", json, plot, rev,
                            trace;
  int gen = 128, repeat = 3;
  uint64_t seed = 1;
  bool sample = false;
  std::vector<std::string> leave_out;
  std::string command;
  // --prefill (bench_prefill.cpp): lengths, and whether --decode was given too.
  std::string prefill;
  bool decode_given = false, split = false;
  int prefill_chunk = 0, chunked_from = 0, moe_bn = 0, dense_bn = 0,
      gemm_bm = 0;  // 0: the backend's default
};

[[maybe_unused]] std::vector<int64_t> parse_lengths(const std::string& s,
                                                    const char* option = "--decode") {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      const int64_t n = std::stoll(item);
      if (n <= 0) throw std::invalid_argument("");
      v.push_back(n);
    } catch (const std::exception&) {
      fail("{}: '{}' is not a positive {} length", option, item,
           std::string(option) == "--prefill" ? "prompt" : "context");
    }
  }
  if (v.empty()) fail("{} needs at least one length", option);
  return v;
}

[[maybe_unused]] double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#ifdef TERN_HAVE_CUDA
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

// Where --plot's prefill plot goes: the path itself, or beside the decode
// plot (NAME-prefill.svg) when both run.
[[maybe_unused]] std::string prefill_plot_path(const std::string& plot, bool with_decode) {
  if (plot.empty() || !with_decode) return plot;
  const size_t dot = plot.rfind('.');
  return plot.substr(0, dot) + "-prefill" + plot.substr(dot);
}

// The JSON of a --prefill run without decode.
[[maybe_unused]] int write_prefill_json(const BenchOptions& o, const nlohmann::json& prefill) {
  if (o.json.empty()) return 0;
  nlohmann::json j = {{"command", o.command},
                      {"git_revision", o.rev},
                      {"backend", "cuda"},
                      {"model", o.dummy.empty() ? o.model : "dummy " + o.dummy}};
  j.update(prefill);
  std::ofstream f(o.json);
  if (!f) fail("cannot write {}", o.json);
  f << j.dump(2) << "\n";
  return 0;
}

int run_bench(const BenchOptions& o) {
  cuda::check_step_kernel_names({o.leave_out.begin(), o.leave_out.end()});
#ifndef TERN_HAVE_CUDA
  fail("tern bench needs the CUDA backend, which is not built into this tern");
#else
  if (o.backend != "cuda") fail("tern bench: only --backend cuda is supported");
  if (o.model.empty() == o.dummy.empty())
    fail("tern bench: give exactly one of --model and --dummy");
  // Before the weights are made: --prefill alone runs no decode sweep.
  const bool decode = o.prefill.empty() || o.decode_given;
  const std::vector<int64_t> lengths = decode ? parse_lengths(o.decode) : std::vector<int64_t>{};
  const std::vector<int64_t> prompts =
      o.prefill.empty() ? std::vector<int64_t>{} : parse_lengths(o.prefill, "--prefill");
  std::unique_ptr<cuda::CudaBackend> be;
  if (!o.dummy.empty()) {
    ModelConfig cfg = parse_config(preset_config(o.dummy), "preset " + o.dummy);
    be = std::make_unique<cuda::CudaBackend>(cuda::DeviceWeights::random(cfg, o.seed));
  } else {
    be = std::make_unique<cuda::CudaBackend>(load_model(o.model, WeightMode::q4));
  }
  be->leave_out({o.leave_out.begin(), o.leave_out.end()});
  cuda::PrefillOptions po;
  if (o.prefill_chunk > 0) po.chunk = o.prefill_chunk;
  if (o.chunked_from > 0) po.chunked_from = o.chunked_from;
  po.moe_bn = o.moe_bn, po.dense_bn = o.dense_bn;
  if (o.gemm_bm > 0) po.gemm_bm = o.gemm_bm;
  be->set_prefill_options(po);
  nlohmann::json prefill_json;
  if (!prompts.empty())
    prefill_json = run_prefill_bench(*be, {.lengths = prompts,
                                           .repeat = o.repeat,
                                           .seed = o.seed,
                                           .split = o.split,
                                           .plot = prefill_plot_path(o.plot, decode)});
  if (!decode) return write_prefill_json(o, prefill_json);
  const ModelConfig& c = be->config();
  const double copy_bw = cuda::copy_bandwidth();
  auto seq = be->new_sequence();
  const int64_t max_len = *std::max_element(lengths.begin(), lengths.end()) + o.gen + 2;
  be->reserve(dynamic_cast<cuda::CudaSequence&>(*seq), max_len);
  const SamplingParams sampling = o.sample ? chat_sampling(o.seed) : SamplingParams{};
  be->start_sampling(*seq, sampling, {});
  const std::string choice =
      o.sample ? "sampler (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repetition 1.1)"
               : "greedy (arg-max)";

  const size_t weights = be->weights().active_bytes_per_token();
  const size_t gdn_state =
      size_t(c.n_linear_layers()) * (2 * size_t(c.lin_v_heads) * c.lin_k_dim * c.lin_v_dim * 4 +
                                     2 * size_t(c.conv_kernel - 1) * c.conv_channels() * 4);
  const size_t kv_per_pos = size_t(c.n_full_layers()) * 2 * c.n_kv_heads * c.head_dim * 2;
  std::printf(
      "copy bandwidth %.0f GB/s; weights read per token %.1f MB; device memory in use %.2f GB\n",
      copy_bw / 1e9, weights / 1e6, double(cuda::device_memory_used()) / 1e9);
  std::printf("token choice: %s\n", choice.c_str());
  if (!o.leave_out.empty())
    fmt::print("left out of the step (timing only, the tokens are not the model's): {}\n",
               fmt::join(o.leave_out, ","));
  std::printf("%9s %10s %9s %10s %9s %10s %8s\n", "context", "tok/s", "ms/tok", "MB/tok", "GB/s",
              "floor", "of floor");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<PlotPoint> points;
  for (int64_t L : lengths) {
    be->fill_synthetic(*seq, L, o.seed + uint64_t(L));
    std::vector<double> secs;
    for (int r = 0; r < o.repeat; ++r) {
      be->set_length(*seq, L);
      secs.push_back(be->time_steps(*seq, o.gen));
    }
    const double t = median(secs) / o.gen, tok_s = 1.0 / t;
    const double bytes =
        double(weights + gdn_state) + double(kv_per_pos) * (double(L) + o.gen / 2.0);
    const double floor_tok_s = copy_bw / bytes;
    std::printf("%9lld %10.1f %9.4f %10.1f %9.0f %10.1f %7.1f%%\n", (long long)L, tok_s, t * 1e3,
                bytes / 1e6, bytes * tok_s / 1e9, floor_tok_s, 100 * tok_s / floor_tok_s);
    std::fflush(stdout);
    rows.push_back({{"context", L},
                    {"tok_s", tok_s},
                    {"ms_per_token", t * 1e3},
                    {"bytes_per_token", bytes},
                    {"gb_s", bytes * tok_s / 1e9},
                    {"floor_tok_s", floor_tok_s},
                    {"fraction_of_floor", tok_s / floor_tok_s},
                    {"seconds_per_repeat", secs}});
    points.push_back({double(L), tok_s, floor_tok_s});
    if (!o.trace.empty() && L == lengths.front()) {
      be->set_length(*seq, L);
      write_trace(o.trace, be->trace_steps(*seq, 2));
    }
  }
  const int kernels = be->step_kernels(*seq);
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
                      {"weights_on_device_bytes", be->weights().total_bytes()},
                      {"device_memory_used_bytes", mem},
                      {"decode", rows}};
  if (!prefill_json.is_null()) j.update(prefill_json);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    if (!f) fail("cannot write {}", o.json);
    f << j.dump(2) << "\n";
  }
  if (!o.plot.empty()) write_decode_plot(o.plot, points);
  return 0;
#endif
}

// tern bench --prefill's options (bench_prefill.cpp runs the sweep).
void add_prefill_options(CLI::App* cmd, BenchOptions& o) {
  cmd->add_option("--prefill", o.prefill,
                  "Comma-separated prompt lengths: time prompt processing to the last token's "
                  "logits (alone, or with --decode)");
  cmd->add_flag("--split", o.split,
                "With --prefill: one more run per length timing each phase (MoE GEMMs, dense "
                "GEMMs, GDN, attention, the rest) next to its FLOP floor");
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "Most tokens a prefill chunk")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gdn-chunked-from", o.chunked_from,
                  "Chunk length from which GDN runs the chunked (WY) form, not the scan")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--moe-bn", o.moe_bn, "Grouped MoE GEMM tile: 64, 128 (0: auto)")
      ->check(CLI::IsMember({0, 64, 128}));
  cmd->add_option("--dense-bn", o.dense_bn, "Dense GEMM tile: 64, 128 (0: auto)")
      ->check(CLI::IsMember({0, 64, 128}));
  cmd->add_option("--gemm-bm", o.gemm_bm, "GEMM weight rows a tile: 128, 256")
      ->check(CLI::IsMember({128, 256}));
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Decode and prefill speed by length (CUDA)");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--model", o->model, "Checkpoint folder");
  cmd->add_option("--dummy", o->dummy,
                  "Random weights of a preset shape, made on the GPU (35b-a3b, tiny)");
  cmd->add_option("--backend", o->backend, "cuda")->check(CLI::IsMember({"cuda"}));
  cmd->add_option("--decode", o->decode, "Comma-separated context lengths");
  cmd->add_option("--gen", o->gen, "Timed tokens per repeat")
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
                  "built with -DTERN_TRACE=ON; bench/trace_summary.py reads it)");
  cmd->add_option("--leave-out", o->leave_out,
                  fmt::format("Step kernels to leave out, comma-separated ({}): the step time "
                              "without them, for a per-kernel breakdown",
                              fmt::join(cuda::step_kernel_names(), ", ")))
      ->delimiter(',');
  cmd->add_option("--rev", o->rev, "Git revision recorded in the JSON");
  add_prefill_options(cmd, *o);
  return [o, cmd] {
    o->decode_given = cmd->count("--decode") > 0;
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
