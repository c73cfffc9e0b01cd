// Micro-benchmark of the fast CPU backend's 4-bit matmul per instruction set
// (and its 8-bit routers'):
// decode (one token and four, a step of four sequences; a matrix far larger
// than L3, so memory streams) and
// prefill shapes (many tokens over a matrix in cache), in GB/s of packed
// weights and G multiply-adds/s, beside the machine's memory bandwidth.
// On x86 with AVX-512 VNNI it first times the core's own vpdpbusd and FMA
// throughput (the ceiling the 4-bit kernels' instruction counts are read
// against, docs/cpu-backend.md).
// Usage: cpu_kernels [threads [isa [shape]]] (shape: decode-memory, decode-cache, routers, expert,
// dense64, dense512, attention, delta, moe, gdn; default all)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/gdn_layer.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/memory_bandwidth.h"
#include "backends/cpu/moe_layer.h"
#include "backends/cpu/pack16.h"
#include "checkpoint/config.h"
#include "core/rng.h"

using namespace tern;
using namespace tern::cpu;

namespace {

struct Matrix {
  std::vector<uint32_t> packed;
  std::vector<uint16_t> scales, biases;
  QTensor t;
};

Matrix random_affine(int64_t rows, int64_t cols, int bits = 4, uint64_t seed = 7) {
  Matrix m;
  CounterRng rng(seed);
  m.packed.resize(size_t(rows * cols * bits / 32));
  for (auto& w : m.packed) w = uint32_t(rng.next_u64());
  m.scales.assign(size_t(rows * cols / 64), 0x3c00);  // bf16 0.0078
  m.biases.assign(size_t(rows * cols / 64), 0xbd80);  // bf16 -0.0625
  m.t.fmt = WFormat::affine;
  m.t.dtype = DType::bf16;
  m.t.rows = rows;
  m.t.cols = cols;
  m.t.bits = bits;
  m.t.group = 64;
  m.t.data = reinterpret_cast<const uint8_t*>(m.packed.data());
  m.t.scales = reinterpret_cast<const uint8_t*>(m.scales.data());
  m.t.biases = reinterpret_cast<const uint8_t*>(m.biases.data());
  return m;
}

struct Acts {
  std::vector<float> x;
  std::vector<int8_t> q;
  std::vector<float> d, s;
  QRows rows;
};

Acts random_acts(const Kernels& k, int64_t T, int64_t cols) {
  CounterRng rng(3);
  std::vector<float> x(size_t(T * cols));
  for (float& v : x) v = rng.normal();
  Acts a;
  a.x = x;
  a.q.resize(x.size());
  a.d.resize(size_t(T * cols / 64));
  a.s.resize(a.d.size());
  for (int64_t t = 0; t < T; ++t)
    k.quantize(&x[size_t(t * cols)], cols, &a.q[size_t(t * cols)], &a.d[size_t(t * cols / 64)],
               &a.s[size_t(t * cols / 64)]);
  a.rows = {a.q.data(), a.d.data(), a.s.data(), cols, nullptr};
  return a;
}

// The fastest of reps calls of fn, each after `before` (untimed).
double best_seconds(int reps, const auto& fn, const auto& before) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double best_seconds(int reps, const auto& fn) {
  return best_seconds(reps, fn, [] {});
}

#if defined(__x86_64__)
// 512-bit vpdpbusd and vfmadd per second on one core: 16 independent chains,
// so latency hides and only issue throughput counts.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vector_op_rates() {
  constexpr long kIters = 20'000'000;
  constexpr int kChains = 16;
  __m512i acc[kChains], x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(2);
  __m512 facc[kChains], u = _mm512_set1_ps(0.5f);
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm512_setzero_si512();
    facc[i] = _mm512_setzero_ps();
  }
  // Plain loops, no lambdas: a lambda would not inherit this function's target.
  double tdp = 1e30, tfma = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (long n = 0; n < kIters; ++n) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], x, y);
      asm volatile("" : "+v"(x));
    }
    auto t1 = std::chrono::steady_clock::now();
    for (long n = 0; n < kIters; ++n) {
      for (int i = 0; i < kChains; ++i) facc[i] = _mm512_fmadd_ps(facc[i], u, u);
      asm volatile("" : "+v"(u));
    }
    auto t2 = std::chrono::steady_clock::now();
    tdp = std::min(tdp, std::chrono::duration<double>(t1 - t0).count());
    tfma = std::min(tfma, std::chrono::duration<double>(t2 - t1).count());
  }
  // Sinks, so the loops are not dropped.
  volatile int32_t keep = 0;
  volatile float fkeep = 0.0f;
  for (int i = 0; i < kChains; ++i) {
    alignas(64) int32_t lanes[16];
    alignas(64) float flanes[16];
    _mm512_store_si512(lanes, acc[i]);
    _mm512_store_ps(flanes, facc[i]);
    keep = keep + lanes[0];
    fkeep = fkeep + flanes[0];
  }
  const double ops = double(kIters) * kChains;
  std::printf("one core: vpdpbusd zmm %.2f G/s (%.0f GMAC/s int8), vfmadd zmm %.2f G/s\n",
              ops / tdp / 1e9, 64 * ops / tdp / 1e9, ops / tfma / 1e9);
}
#endif

void run_shape(const Kernels& k, ThreadPool& pool, const Matrix& m, int64_t T, int64_t block,
               int reps, const char* what, const std::string& only, const char* name) {
  if (!only.empty() && only != name) return;
  Acts a = random_acts(k, T, m.t.cols);
  std::vector<float> y(size_t(T * m.t.rows));
  const OutRows o{y.data(), m.t.rows, nullptr, nullptr, false};
  const size_t items = size_t((m.t.rows + block - 1) / block);
  // The plain layout, then the pack16.h records in 2 MB pages.
  std::unique_ptr<WeightBuffer> records;
  for (bool packed : {false, true}) {
    QTensor t = m.t;
    if (packed) {
      if (!packable(t)) break;
      records = std::make_unique<WeightBuffer>(t.bytes());
      pack16(t, records->data());
      t.data = records->data();
      t.scales = t.biases = nullptr;
      t.packed16 = true;
    }
    auto fn = [&] {
      pool.run(items, [&](size_t i, int) {
        const int64_t r0 = int64_t(i) * block;
        const int64_t r1 = std::min(t.rows, r0 + block);
        if (gemm_q4_takes(t))
          k.gemm_q4(t, r0, r1, a.rows, T, o);
        else  // the 8-bit routers' plain layout
          k.gemm_f32(t, r0, r1, {a.x.data(), t.cols, nullptr}, T, o);
      });
    };
    fn();
    const double s = best_seconds(reps, fn);
    const double macs = double(t.rows) * double(t.cols) * double(T);
    std::printf(
        "%-8s %-8s %-28s rows %6lld cols %5lld T %4lld: %8.3f ms  %6.1f GB/s  %6.1f GMAC/s\n",
        k.name, packed ? "packed16" : "plain", what, (long long)t.rows, (long long)t.cols,
        (long long)T, s * 1e3, double(t.bytes()) / s / 1e9, macs / s / 1e9);
  }
}

// Decode attention over a KV cache of n_keys positions (one query of the GQA
// group's 8 heads, head dim 256, two KV heads a row as the cache stores
// them), keys split over the pool as the attention layer splits them; the
// cache read from memory, as in decode, where the weights streamed between
// two tokens' attention evict it (a 256 MB buffer is written before each call).
void run_attention(const Kernels& k, ThreadPool& pool, int64_t n_keys, const std::string& only) {
  if (!only.empty() && only != "attention") return;
  constexpr int kHeads = 8, kHd = 256, kKv = 2;
  CounterRng rng(5);
  std::vector<float> q(size_t(kHeads * kHd)), kv(size_t(2 * n_keys * kKv * kHd));
  for (float& v : q) v = 0.2f * rng.normal();
  for (float& v : kv) v = rng.normal();
  const int64_t splits = std::max<int64_t>(1, n_keys / 1024), per = (n_keys + splits - 1) / splits;
  const size_t items = size_t(kKv * splits), rows = kHeads;
  std::vector<float> parts(items * rows * (kHd + 2));
  std::vector<std::vector<float>> scratch(size_t(pool.size()),
                                          std::vector<float>(attn_scratch_floats(kHeads, 1, kHd)));
  const float* K = kv.data();
  const float* V = K + n_keys * kKv * kHd;
  auto fn = [&] {
    pool.run(items, [&](size_t i, int thread) {
      const int64_t g = int64_t(i) / splits, s = int64_t(i) % splits;
      float* p = parts.data() + i * rows * (kHd + 2);
      k.attention({q.data(), kHeads * kHd, kHd, kHeads, kHd, 1, n_keys - 1, K + g * kHd,
                   V + g * kHd, kKv * kHd, s * per, std::min(n_keys, (s + 1) * per), 0.0625f, p,
                   p + rows, p + 2 * rows, scratch[size_t(thread)].data()});
    });
  };
  std::vector<uint8_t> evict(size_t(256) << 20);
  uint8_t round = 0;
  fn();
  const double sec = best_seconds(20, fn, [&] { std::fill(evict.begin(), evict.end(), ++round); });
  std::printf(
      "%-8s attention decode, %6lld keys (8 heads x 256, 2 KV heads): %8.3f ms  %6.1f GB/s of K "
      "and V\n",
      k.name, (long long)n_keys, sec * 1e3, double(kv.size() * 4) / sec / 1e9);
}

// Decode's delta rule: one token through the 30 GDN layers' 32 value heads
// (128 x 128 fp32 states, 60 MB in all, so they stream from memory as in
// decode), the heads of a layer over the pool.
void run_delta(const Kernels& k, ThreadPool& pool, const std::string& only) {
  if (!only.empty() && only != "delta") return;
  constexpr int kLayers = 30, kHeads = 32, kD = 128;
  CounterRng rng(9);
  std::vector<float> S(size_t(kLayers) * kHeads * kD * kD), in(size_t(kHeads) * 4 * kD),
      o(size_t(kHeads) * kD);
  for (float& v : S) v = 0.01f * rng.normal();
  for (float& v : in) v = 0.1f * rng.normal();
  const float g = -0.05f, beta = 0.5f;
  auto fn = [&] {
    for (int l = 0; l < kLayers; ++l)
      pool.run(kHeads, [&](size_t h, int) {
        const float* x = in.data() + h * 4 * kD;
        k.delta_recurrent({x, x + kD, x + 2 * kD, &g, &beta, 1, kD, kD,
                           S.data() + (size_t(l) * kHeads + h) * kD * kD, o.data() + h * kD});
      });
  };
  fn();
  const double sec = best_seconds(20, fn);
  std::printf(
      "%-8s delta rule decode, 30 layers x 32 heads (60 MB of state): %8.3f ms  %6.1f GB/s "
      "read + written\n",
      k.name, sec * 1e3, 2.0 * double(S.size() * 4) / sec / 1e9);
}

ModelConfig shapes_35b() {
  return parse_config(preset_config("35b-a3b"), "the 35b-a3b preset");
}

// A random matrix as the fast backend holds it: repacked where pack16 takes
// it (storage kept in `owned` and `records`).
struct Held {
  std::vector<Matrix> owned;
  std::vector<std::unique_ptr<WeightBuffer>> records;
  uint64_t seed = 7;  // each matrix its own codes (the routers' choices differ by layer)
  QTensor make(const Kernels& k, int64_t rows, int64_t cols, int bits) {
    QTensor t = owned.emplace_back(random_affine(rows, cols, bits, seed++)).t;
    if (packable(t)) {
      records.push_back(std::make_unique<WeightBuffer>(t.bytes()));
      pack16(t, records.back()->data());
      t.data = records.back()->data();
      t.scales = t.biases = nullptr;
      t.packed16 = true;
    }
    return t;
  }
};

// Decode's whole Gated DeltaNet block (GdnLayer: the four in-projections, conv,
// the delta rule, the gated norm, the out-projection, its pool runs) through
// the 35b-a3b's 30 such layers (566 MB of matrices, 60 MB of state), one
// token at a time. GB/s: matrices plus state read and written, over the time.
void run_gdn(const Kernels& k, ThreadPool& pool, const std::string& only) {
  if (!only.empty() && only != "gdn") return;
  const ModelConfig c = shapes_35b();
  constexpr int kLayers = 30, kTokens = 32;
  const int64_t C = c.conv_channels();
  Held held;
  CounterRng rng(13);
  std::vector<GdnWeights> w(kLayers);
  std::vector<std::vector<float>> conv_t;
  std::vector<model::GdnState> st;
  double bytes = 0;
  for (GdnWeights& l : w) {
    l.in_qkv = held.make(k, C, c.hidden, 4);
    l.in_z = held.make(k, c.lin_value_dim(), c.hidden, 4);
    l.in_b = held.make(k, c.lin_v_heads, c.hidden, 4);
    l.in_a = held.make(k, c.lin_v_heads, c.hidden, 4);
    l.out = held.make(k, c.hidden, c.lin_value_dim(), 4);
    l.conv.resize(size_t(C * c.conv_kernel));
    for (float& v : l.conv) v = 0.3f * rng.normal();
    l.dt_bias.assign(size_t(c.lin_v_heads), 0.5f);
    l.a_log.assign(size_t(c.lin_v_heads), -1.0f);
    l.norm.assign(size_t(c.lin_v_dim), 1.0f);
    conv_t.push_back(transpose_conv(c, l));
    st.push_back(model::make_gdn_state(c));
    for (const QTensor* t : {&l.in_qkv, &l.in_z, &l.in_b, &l.in_a, &l.out})
      bytes += double(t->bytes());
    bytes += 2.0 * double(st.back().S.size() * sizeof(float));
  }
  std::vector<float> x(size_t(c.hidden)), out(size_t(c.hidden));
  for (float& v : x) v = rng.normal();
  Context ctx{pool, k, true, {}};
  GdnLayer gdn;
  Activations act;
  auto fn = [&] {
    for (int t = 0; t < kTokens; ++t)
      for (int l = 0; l < kLayers; ++l) {
        act.set(pool, k, x.data(), c.hidden, 1, c.hidden, true);
        const SeqRows rows[] = {{0, 1, t, &st[size_t(l)], nullptr}};
        gdn.forward(ctx, c, w[size_t(l)], conv_t[size_t(l)], act, 1, rows, out.data());
      }
  };
  fn();
  const double sec = best_seconds(3, fn) / kTokens;
  std::printf("%-8s gdn blocks decode, 30 layers: %8.3f ms a token  %6.1f GB/s\n", k.name,
              sec * 1e3, bytes / sec / 1e9);
}

// Decode's whole MoE block (MoeLayer: the router, the 8 routed experts and
// the shared one, their down projections and the combine, with its pool runs)
// on the 35b-a3b's shapes, 256 experts (453 MB), through 40 layers a token as
// decode does: each layer has its own router and shared expert (in a model
// they stream from memory too), the routed experts are one set (far larger
// than the caches). Each token comes with a fresh input, so its routes change;
// passes of 4 rows are a step of 4 sequences (the experts the rows touch).
// GB/s: the matrices' bytes a token touches over its time.
void run_moe(const Kernels& k, ThreadPool& pool, int rows, const std::string& only) {
  if (!only.empty() && only != "moe") return;
  const ModelConfig c = shapes_35b();
  constexpr int kLayers = 40, kTokens = 16;
  Held held;
  auto make = [&](int64_t n, int64_t cols, int bits) { return held.make(k, n, cols, bits); };
  std::vector<MoeWeights> w(kLayers);
  for (int e = 0; e < c.n_experts; ++e) {
    w[0].gate.push_back(make(c.moe_inter, c.hidden, 4));
    w[0].up.push_back(make(c.moe_inter, c.hidden, 4));
    w[0].down.push_back(make(c.hidden, c.moe_inter, 4));
  }
  std::vector<size_t> router_at;  // held.owned's index of each layer's router
  for (MoeWeights& l : w) {
    l.gate = w[0].gate, l.up = w[0].up, l.down = w[0].down;
    router_at.push_back(held.owned.size());
    l.router = make(c.n_experts, c.hidden, 8);
    l.shared_expert_gate = make(1, c.hidden, 8);
    l.shared_gate = make(c.shared_inter, c.hidden, 4);
    l.shared_up = make(c.shared_inter, c.hidden, 4);
    l.shared_down = make(c.hidden, c.shared_inter, 4);
  }
  CounterRng rng(11);
  std::vector<float> x(size_t(kTokens * c.hidden)), out(size_t(rows * c.hidden));
  for (float& v : x) v = rng.normal();
  Context ctx{pool, k, true, {}};
  MoeLayer moe;
  Activations act;
  std::vector<int32_t> experts(size_t(c.top_k));
  std::vector<float> logits(size_t(c.n_experts)), weights(size_t(c.top_k));
  std::vector<double> rounds;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t + rows <= kTokens; t += rows)
      for (const MoeWeights& l : w) {
        act.set(pool, k, x.data() + t * c.hidden, c.hidden, rows, c.hidden, true);
        moe.forward(ctx, c, l, act, rows, out.data());
      }
    rounds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The bytes: routers, shared experts and the union of each pass's experts
  // in each layer (routed again here, untimed, from fp32 inputs: a near-tie
  // may pick another expert of the same size).
  double bytes = 0;
  int64_t touched = 0;
  for (int t = 0; t + rows <= kTokens; t += rows)
    for (size_t i = 0; i < w.size(); ++i) {
      const MoeWeights& l = w[i];
      bytes += double(l.router.bytes() + l.shared_gate.bytes() + l.shared_up.bytes() +
                      l.shared_down.bytes());
      std::vector<bool> used(size_t(c.n_experts));
      for (int r = t; r < t + rows; ++r) {
        k.gemm_f32(held.owned[router_at[i]].t, 0, c.n_experts,
                   {x.data() + r * c.hidden, c.hidden, nullptr}, 1, {logits.data(), c.n_experts});
        route(logits.data(), c.n_experts, c.top_k, c.norm_topk, experts.data(), weights.data());
        for (int32_t e : experts) used[size_t(e)] = true;
      }
      for (int e = 0; e < c.n_experts; ++e)
        if (used[size_t(e)]) {
          ++touched;
          bytes += double(l.gate[size_t(e)].bytes() + l.up[size_t(e)].bytes() +
                          l.down[size_t(e)].bytes());
        }
    }
  std::ranges::sort(rounds);
  const double mid = rounds[1], passes = double(kTokens / rows * kLayers);
  std::printf(
      "%-8s moe block decode of %d rows, 40 layers, 256 experts of 512 x 2048: %8.3f ms a "
      "layer (median of 3; min %.3f), %.1f experts  %6.1f GB/s\n",
      k.name, rows, mid / passes * 1e3, rounds[0] / passes * 1e3, double(touched) / passes,
      bytes / mid / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  ThreadPool pool(argc > 1 ? std::atoi(argv[1]) : 2);
  const std::string want_isa = argc > 2 ? argv[2] : "", only = argc > 3 ? argv[3] : "";
  const MemoryBandwidth bw = measure_memory_bandwidth(pool);
  std::printf("threads %d: copy %.1f GB/s (read + write), read %.1f GB/s\n", pool.size(),
              bw.copy / 1e9, bw.read / 1e9);
#if defined(__x86_64__)
  if (std::ranges::count(supported_isas(), Isa::avx512) &&
      (want_isa.empty() || want_isa == "avx512"))
    vector_op_rates();
#endif
  const Matrix big = random_affine(131072, 2048);  // 151 MB: streams from memory
  const Matrix expert = random_affine(1024, 2048), dense = random_affine(8192, 2048);
  const Matrix routers = random_affine(40 * 256, 2048, 8);  // the 35b-a3b's, 8-bit
  for (Isa isa : supported_isas()) {
    if (!want_isa.empty() && want_isa != isa_name(isa)) continue;
    const Kernels& k = kernels(isa);
    run_shape(k, pool, big, 1, 64, 5, "decode, from memory", only, "decode-memory");
    run_shape(k, pool, big, 4, 64, 5, "decode of 4 rows, from memory", only, "decode-memory");
    run_shape(k, pool, expert, 1, 64, 50, "decode, in cache", only, "decode-cache");
    run_shape(k, pool, routers, 1, 64, 20, "decode, 40 8-bit routers", only, "routers");
    run_shape(k, pool, expert, 16, 64, 20, "expert, 16 tokens", only, "expert");
    run_shape(k, pool, dense, 64, 64, 3, "dense, 64 tokens", only, "dense64");
    run_shape(k, pool, dense, 512, 64, 1, "dense, 512 tokens", only, "dense512");
    for (int64_t n : {512, 8192, 32768}) run_attention(k, pool, n, only);
    run_delta(k, pool, only);
    run_moe(k, pool, 1, only);
    run_moe(k, pool, 4, only);
    run_gdn(k, pool, only);
  }
}
