// MoE of a prefill chunk on the GPU with no host round trip: the router's
// logits (8-bit weights, fp32 arithmetic: the expert choice must match the
// CPU's but at near-ties), the top-k choice and weights a warp a token, a
// histogram of rows per expert, a one-warp scan into offsets and the grouped
// GEMMs' tile map (its length stays on the device: the GEMMs launch the upper
// bound and surplus blocks exit), the scatter of the token's slots into expert
// order, and after the grouped GEMMs (prefill_gemm.cu) the combine back into
// token order, each token's slots summed in a fixed order (no float atomics).
// Shapes: T tokens, E experts plus the shared one (group E, every token), A =
// T (top_k + 1) slots.
#include <algorithm>

#include "backends/cuda/pick.cuh"
#include "backends/cuda/prefill_kernels.h"

namespace tern::cuda {

namespace {

// Router GEMM: kTok tokens (64, or 16 for chunks up to 512, whose few 64-token
// blocks left most SMs idle: 187 us a layer at 256 tokens) by 64 router rows
// a block, K in steps of one group; thread (tx, ty) sums rows 4 tx.. by
// tokens kTok / 16 ty.., both operands stored k-major. Every logit is one
// thread's fmaf chain over k in order, whatever the tile.
constexpr int kRK = 64, kRRows = 64, kRThreads = 256, kRPad = kRRows + 4;

template <int kTok>
__global__ void __launch_bounds__(kRThreads)
    router_kernel(DMat W, const float* a32, int T, float* logits) {
  constexpr int kTokPer = kTok / 16;  // tokens a thread
  __shared__ __align__(16) float xs[kRK][kTok + 4], ws[kRK][kRPad];
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int r0 = int(blockIdx.x) * kRRows, t0 = int(blockIdx.y) * kTok, K = W.cols;
  const int wpr = K / 4, gpr = K / kGroup;
  float acc[kTokPer][4] = {};  // [token][row]
  for (int k0 = 0; k0 < K; k0 += kRK) {
    __syncthreads();
    for (int i = tid; i < kTok * kRK; i += kRThreads) {
      const int row = i / kRK, k = i % kRK, t = t0 + row;
      xs[k][row] = t < T ? a32[size_t(t) * K + k0 + k] : 0.0f;
    }
    // Weights: a word (4 codes) a thread, dequantised as the CPU does.
    for (int i = tid; i < kRRows * kRK / 4; i += kRThreads) {
      const int row = i / (kRK / 4), wq = i % (kRK / 4), R = r0 + row;
      float q[4] = {};
      if (R < W.rows) {
        const uint32_t w = W.w[size_t(R) * wpr + (k0 + 4 * wq) / 4];
        const uint32_t sb = W.sb[size_t(R) * gpr + k0 / kGroup];
        const float s = sb_scale(sb), b = sb_bias(sb);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          q[j] = __fadd_rn(__fmul_rn(s, float((w >> (8 * j)) & 0xFFu)), b);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) ws[4 * wq + j][row] = q[j];
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kRK; ++k) {
      float xa[kTokPer];
      if constexpr (kTokPer == 4) {
        const float4 xv = *reinterpret_cast<const float4*>(&xs[k][4 * ty]);
        xa[0] = xv.x, xa[1] = xv.y, xa[2] = xv.z, xa[3] = xv.w;
      } else {
#pragma unroll
        for (int j = 0; j < kTokPer; ++j) xa[j] = xs[k][kTokPer * ty + j];
      }
      const float4 wv = *reinterpret_cast<const float4*>(&ws[k][4 * tx]);
      const float wa[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int j = 0; j < kTokPer; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = fmaf(xa[j], wa[i], acc[j][i]);
    }
  }
#pragma unroll
  for (int j = 0; j < kTokPer; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = t0 + kTokPer * ty + j, R = r0 + 4 * tx + i;
      if (t < T && R < W.rows) logits[size_t(t) * W.rows + R] = acc[j][i];
    }
}

constexpr int kPickWarps = 8, kMaxE = 1024;

// A warp a token: the choice (pick.cuh, ties to the lower id), the weights
// (softmax over the chosen logits: the full softmax renormalised over them),
// the shared gate, and the histogram.
template <int N>
__global__ void __launch_bounds__(kPickWarps * 32) pick_kernel(RouteArgs a) {
  __shared__ float l[kPickWarps][32 * N];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int t = int(blockIdx.x) * kPickWarps + warp;
  if (t >= a.T) return;
  const float* row = a.logits + size_t(t) * (a.E + 1);
  for (int e = lane; e < a.E; e += 32) l[warp][e] = row[e];
  __syncwarp();
  const Choice c = pick_experts<N>(l[warp], a.E, a.top_k);
  const bool mine = lane < a.top_k;
  const float m = warp_max(mine ? c.logit : -INFINITY);
  const float p = mine ? expf(c.logit - m) : 0.0f;
  const float w = p / warp_sum(p);
  if (mine) {
    a.ids[size_t(t) * a.top_k + lane] = c.id;
    a.wts[size_t(t) * (a.top_k + 1) + lane] = w;
    atomicAdd(a.counts + c.id, 1);
  }
  if (lane == 0) a.wts[size_t(t) * (a.top_k + 1) + a.top_k] = 1.0f / (1.0f + expf(-row[a.E]));
}

// One warp: offsets and tile counts by a warp scan (lane l takes groups
// l per .. l per + per - 1), the map, the cursors; the counts are zeroed for
// the next call.
__global__ void scan_kernel(RouteArgs a) {
  const int lane = int(threadIdx.x), G = a.E + 1, per = (G + 31) / 32;
  const int g0 = min(G, lane * per), g1 = min(G, g0 + per);
  auto count = [&](int e) { return e == a.E ? a.T : __ldcg(a.counts + e); };
  int rows = 0, tiles = 0;
  for (int e = g0; e < g1; ++e) rows += count(e), tiles += (count(e) + a.bn - 1) / a.bn;
  int rx = rows, tx = tiles;  // inclusive scans
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int r = __shfl_up_sync(kFull, rx, o), q = __shfl_up_sync(kFull, tx, o);
    if (lane >= o) rx += r, tx += q;
  }
  int off = rx - rows, toff = tx - tiles;
  for (int e = g0; e < g1; ++e) {
    const int n = count(e);
    a.offsets[e] = off, a.cursor[e] = off;
    for (int i = 0; i * a.bn < n; ++i)
      a.map[toff++] = GemmTile{e, off + i * a.bn, min(a.bn, n - i * a.bn), 0};
    off += n;
    if (e < a.E) a.counts[e] = 0;
  }
  if (lane == 31) a.offsets[G] = off, *a.map_count = toff;
}

// A thread a (token, choice): the slot in its expert's rows (the order
// within an expert is the atomics', but every slot's arithmetic is its own,
// so results do not depend on it); the shared expert's slot is fixed.
__global__ void scatter_kernel(RouteArgs a) {
  const int K1 = a.top_k + 1;
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= a.T * K1) return;
  const int t = i / K1, k = i % K1;
  int slot;
  if (k < a.top_k)
    slot = atomicAdd(a.cursor + a.ids[size_t(t) * a.top_k + k], 1);
  else
    slot = a.offsets[a.E] + t;
  a.slot_row[slot] = t;
  a.slot_w[slot] = a.wts[size_t(t) * K1 + k];
  a.token_slot[i] = slot;
}

__global__ void combine_kernel(const float* y, const int* token_slot, int T, int slots, int D,
                               float* h) {
  const int t = int(blockIdx.x);
  const int* ts = token_slot + size_t(t) * slots;
  for (int d = int(threadIdx.x) * 4; d < D; d += int(blockDim.x) * 4) {
    float4 s = make_float4(0, 0, 0, 0);
    for (int k = 0; k < slots; ++k) {
      const float4 v = *reinterpret_cast<const float4*>(y + size_t(ts[k]) * D + d);
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    float4* o = reinterpret_cast<float4*>(h + size_t(t) * D + d);
    float4 hv = *o;
    hv.x += s.x, hv.y += s.y, hv.z += s.z, hv.w += s.w;
    *o = hv;
  }
}

}  // namespace

cudaError_t router_logits(const DMat& W, const float* a32, int T, float* logits, cudaStream_t st) {
  if (W.bits != 8 || W.w == nullptr || W.cols % kRK != 0) return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  const unsigned row_blocks = unsigned((W.rows + kRRows - 1) / kRRows);
  if (T <= 512)  // measured: faster at 256 and 512, slower at 1024 (bench/results 1896ee9)
    router_kernel<16>
        <<<dim3(row_blocks, unsigned((T + 15) / 16)), kRThreads, 0, st>>>(W, a32, T, logits);
  else
    router_kernel<64>
        <<<dim3(row_blocks, unsigned((T + 63) / 64)), kRThreads, 0, st>>>(W, a32, T, logits);
  return cudaGetLastError();
}

int route_max_tiles(int T, int E, int top_k, int bn) {
  return (T * (top_k + 1) + bn - 1) / bn + E + 1;
}

cudaError_t route_tokens(const RouteArgs& a, cudaStream_t st) {
  if (a.E < 1 || a.E > kMaxE || a.top_k < 1 || a.top_k > std::min(a.E, 32) || a.bn <= 0)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  const dim3 pick_grid((a.T + kPickWarps - 1) / kPickWarps);
  if (a.E <= 256)
    pick_kernel<8><<<pick_grid, kPickWarps * 32, 0, st>>>(a);
  else
    pick_kernel<kMaxE / 32><<<pick_grid, kPickWarps * 32, 0, st>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  scan_kernel<<<1, 32, 0, st>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int n = a.T * (a.top_k + 1);
  scatter_kernel<<<(n + 255) / 256, 256, 0, st>>>(a);
  return cudaGetLastError();
}

cudaError_t moe_combine(const float* y, const int* token_slot, int T, int slots, int D, float* h,
                        cudaStream_t st) {
  if (D % 4 != 0) return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  combine_kernel<<<T, 256, 0, st>>>(y, token_slot, T, slots, D, h);
  return cudaGetLastError();
}

}  // namespace tern::cuda
