// tern bench --prefill: for each prompt length, fresh sequences prefilled with
// random tokens, timed (host clock around forward(), which ends in a device
// synchronisation) from the tokens to the last token's logits; the median of
// the repeats as tok/s, the counted TFLOP/s and their fraction of the bf16
// matrix rate measured in the same run (cuBLAS), and the device memory in use
// after the prompt. --split adds one more run per length with the time of
// each phase next to that phase's FLOP floor.
#include "cli/bench_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "cli/bench_timing.h"
#include "cli/plot.h"
#include "core/error.h"

#ifdef TERN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_bench.h"
#include "backends/cuda/prefill.h"
#endif

namespace tern::cli {

PrefillFlops prefill_flops(const ModelConfig& c, int64_t L, int64_t pos0) {
  const double T = double(L), D = c.hidden, I = c.moe_inter, K1 = c.top_k + 1;
  const double hd = c.head_dim, H = c.n_heads;
  const double in_rows = c.conv_channels() + c.lin_value_dim() + 2.0 * c.lin_v_heads;
  const double qkv_rows = (2.0 * c.n_heads + 2.0 * c.n_kv_heads) * hd;
  PrefillFlops f;
  f.moe = c.n_layers * T * (2 * D * (c.n_experts + 1) + K1 * (2 * D * 2 * I + 2 * I * D));
  f.dense = c.n_linear_layers() * T * (2 * D * in_rows + 2.0 * c.lin_value_dim() * D) +
            c.n_full_layers() * T * (2 * D * qkv_rows + 2 * H * hd * D) + 2 * D * double(c.vocab);
  // Causal attention: token t attends pos0 + t + 1 keys, 4 hd FLOPs a key and head.
  f.attention = c.n_full_layers() * 4 * H * hd * (T * double(pos0) + T * (T + 1) / 2);
  // The chunked delta rule per 64-token chunk and value head: the Grams (4 C^2 d),
  // the solve (~2 C^2 d) and the state pass (2 (3 C d^2 + C^2 d)).
  const double C = 64, d = c.lin_k_dim, chunks = std::ceil(T / C);
  f.gdn = c.n_linear_layers() * chunks * c.lin_v_heads *
          (4 * C * C * d + 2 * C * C * d + 2 * (3 * C * d * d + C * C * d));
  return f;
}

nlohmann::json run_prefill_bench(cuda::CudaBackend& be, const PrefillBenchOptions& o) {
#ifndef TERN_HAVE_CUDA
  (void)be, (void)o;
  fail("tern bench --prefill needs the CUDA backend");
#else
  const ModelConfig& c = be.config();
  const double rate = cuda::bf16_matrix_rate();
  const cuda::PrefillOptions& po = be.prefill_options();
  std::printf("bf16 matrix rate (cuBLAS 8192^3, this run): %.0f TFLOP/s%s\n", rate / 1e12,
              rate > 0 ? "" : " (no cuBLAS found: fractions left out)");
  std::printf("prefill chunk %d tokens, GDN chunked form from %d tokens, dense GEMM tiles of %s\n",
              po.chunk, po.chunked_from,
              po.gemm_bm != 0 ? (std::to_string(po.gemm_bm) + " rows").c_str()
                              : "128 rows at 64 slots, else 256");
  std::printf("%9s %10s %10s %10s %9s %8s %10s\n", "prompt", "tok/s", "ms", "TFLOP", "TFLOP/s",
              "of bf16", "mem GB");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<PlotPoint> points;
  for (const int64_t L : o.lengths) {
    if (L > c.max_positions) fail("--prefill: {} tokens exceed the model's {}", L, c.max_positions);
    const uint64_t seed = o.seed + uint64_t(L);   // the same prompt for every run of a length
    if (L < 16384) time_prefill(be, L, 1, seed);  // warm-up (buffers, first launches)
    const std::vector<double> secs = time_prefill(be, L, o.repeat, seed);
    const size_t mem = cuda::device_memory_used();
    const double t = median(secs), tok_s = double(L) / t;
    const PrefillFlops f = prefill_flops(c, L);
    const double tflops = f.total() / t / 1e12;
    std::printf("%9lld %10.0f %10.2f %10.2f %9.1f %7.1f%% %10.2f\n", (long long)L, tok_s, t * 1e3,
                f.total() / 1e12, tflops, rate > 0 ? 100 * f.total() / t / rate : 0.0,
                double(mem) / 1e9);
    std::fflush(stdout);
    nlohmann::json row = {{"prompt", L},
                          {"tok_s", tok_s},
                          {"ms", t * 1e3},
                          {"seconds_per_repeat", secs},
                          {"tflop", f.total() / 1e12},
                          {"tflop_s", tflops},
                          {"fraction_of_bf16", rate > 0 ? f.total() / t / rate : 0.0},
                          {"device_memory_used_bytes", mem}};
    if (o.split) {
      cuda::PrefillProfile prof;
      cuda::CudaBench(be).set_prefill_profile(&prof);
      const double total = time_prefill(be, L, 1, seed).front();
      cuda::CudaBench(be).set_prefill_profile(nullptr);
      const double phase_flops[] = {f.moe, f.dense, f.gdn, f.attention, 0.0};
      nlohmann::json split = nlohmann::json::object();
      std::printf("  split at %lld (%.1f ms profiled):", (long long)L, total * 1e3);
      for (int p = 0; p < int(cuda::PrefillPhase::count); ++p) {
        const double s = prof.seconds[p], floor = rate > 0 ? phase_flops[p] / rate : 0.0;
        split[cuda::kPrefillPhaseNames[p]] = {
            {"ms", s * 1e3}, {"floor_ms", floor * 1e3}, {"tflop", phase_flops[p] / 1e12}};
        std::printf(" %s %.1f ms (floor %.1f)", cuda::kPrefillPhaseNames[p], s * 1e3, floor * 1e3);
      }
      std::printf("\n  by kernel:");
      nlohmann::json kernels = nlohmann::json::object();
      for (const auto& [name, secs_k] : prof.kernels) {
        kernels[name] = secs_k * 1e3;
        std::printf(" %s %.1f", name.c_str(), secs_k * 1e3);
      }
      std::printf(" (ms)\n");
      row["split"] = split;
      row["split_kernels_ms"] = kernels;
      row["split_total_ms"] = total * 1e3;
    }
    rows.push_back(row);
    points.push_back({double(L), tok_s, rate > 0 ? rate * double(L) / f.total() : tok_s});
  }
  if (!o.plot.empty()) write_prefill_plot(o.plot, points);
  return {{"bf16_matrix_rate_tflop_s", rate / 1e12},
          {"prefill_options",
           {{"chunk", po.chunk},
            {"step_below", po.step_below},
            {"chunked_from", po.chunked_from},
            {"moe_bn", po.moe_bn},
            {"dense_bn", po.dense_bn},
            {"gemm_bm", po.gemm_bm},
            {"moe_bm", po.moe_bm}}},
          {"prefill_tokens", "uniform random ids (seeded), fresh sequence per repeat"},
          {"prefill", rows}};
#endif
}

}  // namespace tern::cli
