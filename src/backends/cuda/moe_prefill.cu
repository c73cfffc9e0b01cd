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

// Router GEMM: a block takes kTok tokens by kRows router rows (16 x 16 for
// chunks up to 512 tokens, whose few 64 x 64 blocks left most SMs idle: 187
// us a layer at 256 tokens; 64 x 64 above), K in steps of one group (steps
// of 256 for 16 x 16 measured slower: 110 against 83 us a layer at 256
// tokens, bench/results af6b5ec), the next
// step's words and activations loaded into registers while the current one is
// summed. Thread (tx, ty) sums rows kRows / 16 tx.. by tokens kTok / 16 ty..,
// both operands stored k-major in shared memory. Every logit is one thread's
// fmaf chain over k in order, whatever the tile.
constexpr int kRK = 64, kRThreads = 256;

template <int kTok, int kRows>
__global__ void __launch_bounds__(kRThreads)
    router_kernel(DMat W, const float* a32, int T, float* logits) {
  constexpr int kTokPer = kTok / 16, kRowPer = kRows / 16;  // a thread's tokens, rows
  constexpr int kXN = kTok * kRK / kRThreads, kWN = kRows * kRK / 4 / kRThreads;  // loads a thread
  __shared__ __align__(16) float xs[kRK][kTok + 4], ws[kRK][kRows + 4];
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int r0 = int(blockIdx.x) * kRows, t0 = int(blockIdx.y) * kTok, K = W.cols;
  const int wpr = K / 4, gpr = K / kGroup;
  float xr[kXN];
  uint32_t wr[kWN], sbr[kWN];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int n = 0; n < kXN; ++n) {
      const int i = tid + n * kRThreads, t = t0 + i / kRK;
      xr[n] = t < T ? a32[size_t(t) * K + k0 + i % kRK] : 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kWN; ++n) {
      const int i = tid + n * kRThreads, R = r0 + i / (kRK / 4), wq = i % (kRK / 4);
      wr[n] = R < W.rows ? W.w[size_t(R) * wpr + k0 / 4 + wq] : 0u;
      sbr[n] = R < W.rows ? W.sb[size_t(R) * gpr + (k0 + 4 * wq) / kGroup] : 0u;
    }
  };
  // Weights dequantised as the CPU does (rows past the matrix are zero).
  auto store = [&] {
#pragma unroll
    for (int n = 0; n < kXN; ++n) {
      const int i = tid + n * kRThreads;
      xs[i % kRK][i / kRK] = xr[n];
    }
#pragma unroll
    for (int n = 0; n < kWN; ++n) {
      const int i = tid + n * kRThreads, row = i / (kRK / 4), wq = i % (kRK / 4);
      const bool in = r0 + row < W.rows;
      const float sc = sb_scale(sbr[n]), bi = sb_bias(sbr[n]);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        ws[4 * wq + j][row] =
            in ? __fadd_rn(__fmul_rn(sc, float((wr[n] >> (8 * j)) & 0xFFu)), bi) : 0.0f;
    }
  };
  float acc[kTokPer][kRowPer] = {};  // [token][row]
  fetch(0);
  for (int k0 = 0; k0 < K; k0 += kRK) {
    __syncthreads();  // every thread is done with the last step's tiles
    store();
    __syncthreads();
    if (k0 + kRK < K) fetch(k0 + kRK);
#pragma unroll 8
    for (int k = 0; k < kRK; ++k) {
      float xa[kTokPer], wa[kRowPer];
#pragma unroll
      for (int j = 0; j < kTokPer; ++j) xa[j] = xs[k][kTokPer * ty + j];
#pragma unroll
      for (int i = 0; i < kRowPer; ++i) wa[i] = ws[k][kRowPer * tx + i];
#pragma unroll
      for (int j = 0; j < kTokPer; ++j)
#pragma unroll
        for (int i = 0; i < kRowPer; ++i) acc[j][i] = fmaf(xa[j], wa[i], acc[j][i]);
    }
  }
#pragma unroll
  for (int j = 0; j < kTokPer; ++j)
#pragma unroll
    for (int i = 0; i < kRowPer; ++i) {
      const int t = t0 + kTokPer * ty + j, R = r0 + kRowPer * tx + i;
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
  if (W.bits != 8 || W.w == nullptr || W.cols % kGroup != 0) return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  auto blocks = [&](int rows, int tok) {
    return dim3(unsigned((W.rows + rows - 1) / rows), unsigned((T + tok - 1) / tok));
  };
  if (T <= 512)
    router_kernel<16, 16><<<blocks(16, 16), kRThreads, 0, st>>>(W, a32, T, logits);
  else
    router_kernel<64, 64><<<blocks(64, 64), kRThreads, 0, st>>>(W, a32, T, logits);
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
