#include "backends/cuda/device_weights.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/moe.h"
#include "core/error.h"
#include "model/rope.h"

namespace tern::cuda {

void check_supported(const ModelConfig& c) {
  if (c.head_dim != kHeadDim)
    fail("CUDA backend: head_dim {} (kernels need {})", c.head_dim, kHeadDim);
  if (c.lin_k_dim != kGdnDim || c.lin_v_dim != kGdnDim)
    fail("CUDA backend: GDN head dims {}/{} (kernels need {})", c.lin_k_dim, c.lin_v_dim, kGdnDim);
  if (c.top_k > kMaxTopK) fail("CUDA backend: top_k {} > {}", c.top_k, kMaxTopK);
  if (c.n_experts > 1024) fail("CUDA backend: {} experts > 1024", c.n_experts);
  const int g = c.n_heads / std::max(1, c.n_kv_heads);
  if (c.n_heads % c.n_kv_heads != 0 || (g != 1 && g != 2 && g != 4 && g != 8))
    fail("CUDA backend: GQA group {} (kernels take 1, 2, 4 or 8)", g);
  if (c.rotary_dim % 16 != 0 || c.rotary_dim < 0 || c.rotary_dim > kHeadDim)
    fail("CUDA backend: rotary dim {} (kernels need a multiple of 16 up to {})", c.rotary_dim,
         kHeadDim);
  if (c.hidden % 256 != 0 && c.hidden % 64 != 0) fail("CUDA backend: hidden {}", c.hidden);
  if (c.moe_inter != c.shared_inter)
    fail("CUDA backend: expert width {} != shared expert width {}", c.moe_inter, c.shared_inter);
  if (c.moe_inter % 64 != 0)
    fail("CUDA backend: expert width {} not a multiple of 64", c.moe_inter);
  // The prefill reads the GDN in-projection's rows (C + Vd + 2 Hv floats) 16
  // bytes at a time (gdn_prep).
  if (c.lin_v_heads % 2 != 0)
    fail("CUDA backend: {} GDN value heads (the prefill needs an even number)", c.lin_v_heads);
  // The GDN out-projection applies the gated RMSNorm in its tensor-core
  // staging only (gemv in gemv.cu).
  if (!gemv_tiles(DMat{.rows = c.hidden, .cols = c.lin_value_dim(), .bits = 4}))
    fail(
        "CUDA backend: GDN value width {} ({} heads of {}); the out-projection's gated norm needs "
        "a multiple of 128 up to 4096",
        c.lin_value_dim(), c.lin_v_heads, c.lin_v_dim);
}

// Empty weights for config c, once c is one the kernels take and there is a
// GPU to run on (without one, the first allocation would fail in the runtime's
// words, e.g. about driver versions).
std::unique_ptr<DeviceWeights> DeviceWeights::empty(const ModelConfig& c) {
  check_supported(c);
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess)
    fail("CUDA backend: no usable GPU ({})", cudaGetErrorString(e));
  if (n == 0) fail("CUDA backend: no GPU found");
  std::unique_ptr<DeviceWeights> d(new DeviceWeights);
  d->cfg = c;
  const std::vector<float> f = rope_inv_freqs(c.rope_theta, std::max(c.rotary_dim, 2));
  d->rope_inv_freq = d->alloc_vec(f.size());
  check(cudaMemcpy(d->rope_inv_freq, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice),
        "rotary table");
  return d;
}

DeviceWeights::~DeviceWeights() {
  for (void* p : ptrs_) cudaFree(p);
}

void* DeviceWeights::alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc of weights");
  ptrs_.push_back(p);
  bytes_ += bytes;
  return p;
}

DMat DeviceWeights::alloc_mat(int rows, int cols, int bits) {
  DMat m;
  m.rows = rows, m.cols = cols, m.bits = bits;
  m.w = static_cast<uint32_t*>(alloc(size_t(rows) * cols * bits / 8));
  m.sb = static_cast<uint32_t*>(alloc(size_t(rows) * (cols / kGroup) * 4));
  return m;
}

void DeviceWeights::to_tile_layout(DMat& m, int pair) {
  auto* t = static_cast<uint8_t*>(alloc(tiled_bytes(m)));
  check(to_tiles(m, t, pair, nullptr), "tile layout");
  check(cudaDeviceSynchronize(), "tile layout");
  for (const void* p : {static_cast<const void*>(m.w), static_cast<const void*>(m.sb)}) {
    ptrs_.erase(std::find(ptrs_.begin(), ptrs_.end(), p));
    cudaFree(const_cast<void*>(p));
  }
  bytes_ -= m.bytes();
  m.tiles = t, m.w = nullptr, m.sb = nullptr;
}

float* DeviceWeights::alloc_vec(size_t n) {
  return static_cast<float*>(alloc(n * sizeof(float)));
}

size_t DeviceWeights::active_bytes_per_token() const {
  auto row = [](const DMat& m) { return m.bytes() / size_t(m.rows); };
  size_t b = lm_head.bytes() + row(embed);
  const size_t slots = size_t(cfg.top_k + 1);
  for (const DevLayer& L : layers) {
    b += L.type == LayerType::linear_attention ? L.in_proj.bytes() + L.out.bytes()
                                               : L.qkv.bytes() + L.o.bytes();
    b += L.router.bytes() + slots * 2 * size_t(cfg.moe_inter) * row(L.gate_up) +
         slots * size_t(cfg.hidden) * row(L.down);
  }
  return b;
}

namespace {

// Copies the rows of a host matrix into rows [r0, r0 + t.rows) of m.
void put(const DMat& m, int r0, const QTensor& t) {
  if (!t.quantized())
    fail(
        "CUDA backend needs affine {}-bit group-64 weights: load this dense checkpoint with "
        "--weights q4 (quantised at load)",
        m.bits);
  if (t.bits != m.bits || t.group != kGroup || t.cols != m.cols || t.dtype != DType::bf16)
    fail(
        "CUDA backend needs affine {}-bit group-64 weights with bf16 scales; this checkpoint has "
        "{}-bit group-{} weights with {} scales: quantise its bf16 original with `tern convert` "
        "(4-bit group 64)",
        m.bits, t.bits, t.group, dtype_name(t.dtype));
  const size_t wrow = size_t(m.cols) * m.bits / 32, grow = size_t(m.cols / kGroup);
  check(cudaMemcpy(const_cast<uint32_t*>(m.w) + size_t(r0) * wrow, t.data, t.row_bytes() * t.rows,
                   cudaMemcpyHostToDevice),
        "upload");
  std::vector<uint32_t> sb(grow * size_t(t.rows));
  for (size_t i = 0; i < sb.size(); ++i) {
    uint16_t s = 0, b = 0;  // the checkpoint's bf16 bits (any alignment)
    std::memcpy(&s, t.scales + 2 * i, 2);
    std::memcpy(&b, t.biases + 2 * i, 2);
    sb[i] = scale_bias(s, b);
  }
  check(cudaMemcpy(const_cast<uint32_t*>(m.sb) + size_t(r0) * grow, sb.data(), sb.size() * 4,
                   cudaMemcpyHostToDevice),
        "upload");
}

void put_vec(float* d, const std::vector<float>& v) {
  check(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
}

}  // namespace

std::unique_ptr<DeviceWeights> DeviceWeights::upload(const ModelWeights& w) {
  const ModelConfig& c = w.cfg;
  std::unique_ptr<DeviceWeights> d = empty(c);
  const int D = c.hidden, E = c.n_experts, I = c.moe_inter;
  auto mat = [&](const std::vector<const QTensor*>& parts, int bits) {
    int rows = 0;
    for (const QTensor* t : parts) rows += int(t->rows);
    DMat m = d->alloc_mat(rows, int(parts[0]->cols), bits);
    int r = 0;
    for (const QTensor* t : parts) put(m, r, *t), r += int(t->rows);
    return m;
  };
  auto vec = [&](const std::vector<float>& v) {
    float* p = d->alloc_vec(v.size());
    put_vec(p, v);
    return p;
  };
  d->embed = mat({&w.embed}, 4);
  d->lm_head = mat({&w.lm_head}, 4);
  d->final_norm = vec(w.final_norm);
  for (const LayerWeights& L : w.layers) {
    DevLayer dl;
    dl.type = L.type;
    dl.in_norm = vec(L.in_norm);
    dl.post_norm = vec(L.post_norm);
    if (L.type == LayerType::linear_attention) {
      const GdnWeights& g = L.gdn;
      dl.in_proj = mat({&g.in_qkv, &g.in_z, &g.in_b, &g.in_a}, 4);
      dl.out = mat({&g.out}, 4);
      dl.conv = vec(g.conv), dl.dt_bias = vec(g.dt_bias), dl.a_log = vec(g.a_log);
      dl.gnorm = vec(g.norm);
    } else {
      dl.qkv = mat({&L.attn.q, &L.attn.k, &L.attn.v}, 4);
      dl.o = mat({&L.attn.o}, 4);
      dl.q_norm = vec(L.attn.q_norm), dl.k_norm = vec(L.attn.k_norm);
    }
    const MoeWeights& m = L.moe;
    dl.router = mat({&m.router, &m.shared_expert_gate}, 8);
    dl.gate_up = d->alloc_mat((E + 1) * 2 * I, D, 4);
    dl.down = d->alloc_mat((E + 1) * D, I, 4);
    for (int e = 0; e <= E; ++e) {
      put(dl.gate_up, e * 2 * I, e < E ? m.gate[size_t(e)] : m.shared_gate);
      put(dl.gate_up, e * 2 * I + I, e < E ? m.up[size_t(e)] : m.shared_up);
      put(dl.down, e * D, e < E ? m.down[size_t(e)] : m.shared_down);
    }
    d->layers.push_back(dl);
  }
  d->tile_matrices();
  // The copies from pageable memory may still be in flight when cudaMemcpy
  // returns; the backend's non-blocking stream would not wait for them.
  check(cudaDeviceSynchronize(), "upload");
  return d;
}

void DeviceWeights::tile_matrices() {
  for (DevLayer& L : layers) {
    for (DMat* m : {&L.in_proj, &L.out, &L.qkv, &L.o})
      if (gemv_tiles(*m)) to_tile_layout(*m, 0);
    if (up_tiles(L.gate_up, cfg.moe_inter)) to_tile_layout(L.gate_up, cfg.moe_inter);
    if (down_tiles(L.down, cfg.hidden, cfg.top_k)) to_tile_layout(L.down, 0);
  }
  if (gemv_tiles(lm_head)) to_tile_layout(lm_head, 0);
}

std::unique_ptr<DeviceWeights> DeviceWeights::random(const ModelConfig& c, uint64_t seed) {
  std::unique_ptr<DeviceWeights> d = empty(c);
  uint64_t next = seed * 1000003ull;
  // Uniform codes; scale and bias chosen so that w has mean ~0 and std ~sigma.
  auto mat = [&](int rows, int cols, int bits, float sigma) {
    DMat m = d->alloc_mat(rows, cols, bits);
    const float code_std = bits == 4 ? 4.61f : 73.9f, mid = bits == 4 ? 7.5f : 127.5f;
    const float s = sigma / code_std;
    const size_t groups = size_t(rows) * (cols / kGroup);
    check(fill_u32(const_cast<uint32_t*>(m.w), size_t(rows) * cols * bits / 32, ++next, nullptr),
          "fill");
    check(fill_scale_bias(const_cast<uint32_t*>(m.sb), groups, 0.9f * s, 1.1f * s, -1.1f * mid * s,
                          -0.9f * mid * s, ++next, nullptr),
          "fill");
    return m;
  };
  auto vec = [&](size_t n, float lo, float hi) {
    float* p = d->alloc_vec(n);
    check(fill_f32(p, n, lo, hi, ++next, nullptr), "fill");
    return p;
  };
  const int D = c.hidden, E = c.n_experts, I = c.moe_inter, Hv = c.lin_v_heads;
  const float in = 1.0f / std::sqrt(float(D));
  d->embed = mat(c.vocab, D, 4, 1.0f);
  d->lm_head = mat(c.vocab, D, 4, 3.0f * in);
  d->final_norm = vec(size_t(D), 0.9f, 1.1f);
  for (int i = 0; i < c.n_layers; ++i) {
    DevLayer L;
    L.type = c.layer_types[size_t(i)];
    L.in_norm = vec(size_t(D), 0.9f, 1.1f);
    L.post_norm = vec(size_t(D), 0.9f, 1.1f);
    if (L.type == LayerType::linear_attention) {
      L.in_proj = mat(c.conv_channels() + c.lin_value_dim() + 2 * Hv, D, 4, in);
      L.out = mat(D, c.lin_value_dim(), 4, 0.3f / std::sqrt(float(c.lin_value_dim())));
      L.conv = vec(size_t(c.conv_channels()) * c.conv_kernel, -0.5f, 0.5f);
      L.dt_bias = vec(size_t(Hv), -1.0f, 1.0f);
      L.a_log = vec(size_t(Hv), 0.0f, 2.77f);
      L.gnorm = vec(size_t(kGdnDim), 0.9f, 1.1f);
    } else {
      L.qkv = mat((2 * c.n_heads + 2 * c.n_kv_heads) * kHeadDim, D, 4, in);
      L.o = mat(D, c.n_heads * kHeadDim, 4, 0.3f / std::sqrt(float(c.n_heads * kHeadDim)));
      L.q_norm = vec(kHeadDim, 0.9f, 1.1f);
      L.k_norm = vec(kHeadDim, 0.9f, 1.1f);
    }
    L.router = mat(E + 1, D, 8, in);
    L.gate_up = mat((E + 1) * 2 * I, D, 4, in);
    L.down = mat((E + 1) * D, I, 4, 0.3f / std::sqrt(float(I)));
    d->layers.push_back(L);
  }
  check(cudaDeviceSynchronize(), "random weights");
  d->tile_matrices();
  check(cudaDeviceSynchronize(), "random weights");
  return d;
}

}  // namespace tern::cuda
