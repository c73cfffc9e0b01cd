// Gated attention decode: split-K GQA attention (each CTA takes one KV head
// and one range of positions; each KV row is read once for all G query heads
// of the group) with the prep fused in (q/k RMSNorm, partial rotate-half RoPE,
// KV append in bf16), and the combine, which also applies sigmoid(gate).
#include <algorithm>

#include "backends/cuda/attention.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/host_state.h"
#include "backends/cuda/rows.h"
#include "backends/cuda/trace.cuh"

namespace tern::cuda {

namespace {

constexpr int kD = kHeadDim;

// The split kernel on tensor cores (mma m16n8k16, bf16 in, fp32 accumulate).
// Each warp takes chunks of 16 positions of one KV head:
//   S^T = Q K^T: A = the G query heads (rows 0-7: bf16 high parts of q, rows
//   8-15: the low parts, so the sum of the two rows keeps ~16 bits of q), B =
//   8 keys; a lane's accumulator is head g's scores of positions 2t, 2t+1.
//   O^T += V^T P^T: A = 16 dims of 16 values, B = the probabilities (high and
//   low parts in two mmas), which are the S accumulators as they stand.
// Contractions are order-free, so every lane reads whole 16-byte pieces of the
// rows it needs and the fragments follow from them (K: 8 dims per piece for two
// mmas; V: 8 dims of one position, paired across positions with PRMT). The
// cache keeps each chunk's pieces in the lanes' order (layout.h), so a chunk
// comes into a warp's ring by two bulk copies (the TMA engine: 32 per-lane
// copies a chunk kept the load-store unit busy) and each lane reads its own
// pieces without bank conflicts. The first chunks are requested before the PDL
// wait (the cache rows below *pos were written by earlier steps); the warp
// attending the new row makes it from qkv and writes it over the stale copy in
// its ring.
constexpr int kWarps = 4;
constexpr int kQRounds = 8 / kWarps;  // the q fragments' k32 blocks a warp
static_assert(8 % kWarps == 0, "every warp stages the same number of q blocks");
constexpr int kChunk = kKvChunk;  // positions per warp step
constexpr int kStages = 2;        // chunks in flight per warp
constexpr int kPieces = 32;       // 16-byte pieces per lane per chunk: 16 of K, then 16 of V
constexpr int kRow = kD / 8;      // 16-byte pieces per cache row
constexpr size_t kQBytes = 2 * 8 * 32 * 16;  // q fragments: [hi, lo][8 k32 blocks][lane]
constexpr size_t kRingBytes = size_t(kWarps) * kStages * kPieces * 32 * 16;
constexpr size_t kSplitSmem = kQBytes + kRingBytes;
// The ring becomes the merge's scratch: each warp's max, sum, weights and O,
// whose rows are padded to 257 floats: a lane's O^T entries (dims 8g + .., heads
// 2t, 2t+1) then fall in 16 banks instead of 4 (the stores were 8-way
// conflicts, ~1 us of the merge at 4K).
constexpr int kORow = kD + 1;
static_assert(kRingBytes >= sizeof(float) * kWarps * 8 * (3 + kORow), "merge scratch");
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

// Requests chunk c (positions 16c..16c+15; the cache's chunk layout is the
// slot's, layout.h) into `slot`, K's 8 KB then V's, completing on `bar`. One
// lane. Rows past the context are whatever the cache holds there (finite: the
// cache starts zeroed); their scores are masked.
__device__ __forceinline__ void fetch_chunk(uint4* slot, const uint4* K, const uint4* V, int c,
                                            uint64_t* bar) {
  constexpr uint32_t kBytes = kChunk * kRow * 16;
  mbar_arrive_expect(bar, 2 * kBytes);
  bulk_copy(slot, K + size_t(c) * kChunk * kRow, kBytes, bar);
  bulk_copy(slot + kChunk * kRow, V + size_t(c) * kChunk * kRow, kBytes, bar);
}

// One warp's running softmax state: head g's max (log2 units) and this lane's
// share of its sum, and O^T for dims (see dim_of) x heads 2t, 2t+1.
struct Running {
  float m = -INFINITY, l = 0.0f;
  float acc[16][4] = {};
};

// The dim of accumulator row r (0..15) of m-tile i (0..15).
__device__ __forceinline__ int dim_of(int r, int i) {
  return 128 * (i / 8) + (r < 8 ? 8 * r : 64 + 8 * (r - 8)) + i % 8;
}

__device__ __forceinline__ void attend_chunk(Running& st, const uint4* slot, const uint4* qf,
                                             int p0, int n) {
  const int lane = threadIdx.x & 31, t = lane & 3;
  // S^T: two n-tiles of 8 positions, even and odd k32 blocks accumulated apart.
  float s[2][2][4] = {};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint4 qh = qf[j * 32 + lane], ql = qf[(8 + j) * 32 + lane];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint4 k = slot[(nt * 8 + j) * 32 + lane];
      mma_bf16(s[nt][j & 1], {qh.x, ql.x, qh.y, ql.y}, k.x, k.y);
      mma_bf16(s[nt][j & 1], {qh.z, ql.z, qh.w, ql.w}, k.z, k.w);
    }
  }
  float sc[2][2], mx = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float v = (s[nt][0][e] + s[nt][0][2 + e]) + (s[nt][1][e] + s[nt][1][2 + e]);
      sc[nt][e] = p0 + nt * 8 + 2 * t + e < n ? v : -INFINITY;
      mx = fmaxf(mx, sc[nt][e]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
  const float mn = fmaxf(st.m, mx), corr = exp2f(st.m - mn);
  float p[2][2], sum = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) sum += (p[nt][e] = exp2f(sc[nt][e] - mn));
  st.l = st.l * corr + sum;
  st.m = mn;
  // The running max rarely moves after the first chunks: rescale only when it
  // did for some head. Lane (g, t) holds heads 2t and 2t+1.
  if (__any_sync(kFull, corr != 1.0f)) {
    const float ca = __shfl_sync(kFull, corr, 8 * t), cb = __shfl_sync(kFull, corr, 8 * t + 4);
#pragma unroll
    for (int i = 0; i < 16; ++i)
      st.acc[i][0] *= ca, st.acc[i][1] *= cb, st.acc[i][2] *= ca, st.acc[i][3] *= cb;
  }
  uint32_t bh[2], bl[2];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const float h0 = __bfloat162float(__float2bfloat16_rn(p[nt][0]));
    const float h1 = __bfloat162float(__float2bfloat16_rn(p[nt][1]));
    bh[nt] = bf16x2(h0, h1);
    bl[nt] = bf16x2(p[nt][0] - h0, p[nt][1] - h1);
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    uint4 v[4][2];
#pragma unroll
    for (int pp = 0; pp < 4; ++pp)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) v[pp][h2] = slot[(16 + pp * 4 + hh * 2 + h2) * 32 + lane];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const unsigned sel = (e & 1) ? 0x7632u : 0x5410u;
      const uint32_t a0 = __byte_perm(word(v[0][0], e / 2), word(v[1][0], e / 2), sel);
      const uint32_t a1 = __byte_perm(word(v[0][1], e / 2), word(v[1][1], e / 2), sel);
      const uint32_t a2 = __byte_perm(word(v[2][0], e / 2), word(v[3][0], e / 2), sel);
      const uint32_t a3 = __byte_perm(word(v[2][1], e / 2), word(v[3][1], e / 2), sel);
      float(&d)[4] = st.acc[hh * 8 + e];
      mma_bf16(d, {a0, a1, a2, a3}, bh[0], bh[1]);
      mma_bf16(d, {a0, a1, a2, a3}, bl[0], bl[1]);
    }
  }
}

__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// Eight consecutive dims of a head from d0 (a multiple of 8; the rotary width
// is a multiple of 16, so all eight lie on one side of its half): the RMSNorm
// weight and, below the rotary width, the partner dims' weight. The rotation's
// cos and sin by frequency come from shared memory (rotation()).
struct Rope8 {
  int pair = -1, freq = 0;  // the partner dims' start (or -1 past the rotary width); d0's frequency
  float sign = 0.0f;        // rotate-half: -1 below the half, +1 above
  float w[8] = {}, wp[8] = {};

  __device__ void init(const float* norm, int d0, int rotary) {
    const int half = rotary / 2;
    if (d0 < rotary) {
      pair = d0 < half ? d0 + half : d0 - half;
      freq = min(d0, pair), sign = d0 < half ? -1.0f : 1.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = norm[d0 + i], wp[i] = pair < 0 ? 0.0f : norm[pair + i];
  }
  // Raw values of the dims and of their partners (row + d0 and row + pair).
  __device__ void load(const float* row, int d0, float (&x)[8], float (&xp)[8]) const {
    load8(row + d0, x);
    if (pair >= 0) load8(row + pair, xp);
  }
  // x normalised by the factor f and rotated, in the CPU's order: (x f) w.
  __device__ void apply(float (&x)[8], const float (&xp)[8], float f, const float* cs,
                        const float* sn) const {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = x[i] * f * w[i];
      x[i] = pair < 0 ? v : v * cs[freq + i] + xp[i] * f * wp[i] * (sign * sn[freq + i]);
    }
  }
};

// The rotation's cos and sin of each frequency, a thread each (rotary / 2 <=
// 128 threads), from the host's inverse frequencies (model/rope.h: the CPU's
// exact fp32 angle). *pos moves only between steps, so this (and sincosf's
// slow path past |angle| ~ 1e5) runs before the wait, off the attention's path;
// the first barrier after it publishes them.
__device__ __forceinline__ void rotation(float* cs, float* sn, int rotary, const float* inv_freq,
                                         int pos) {
  const int i = int(threadIdx.x);
  if (i >= rotary / 2) return;
  sincosf(float(pos) * inv_freq[i], &sn[i], &cs[i]);
}

__global__ void rotation_kernel(const float* inv_freq, int rotary, int pos, float* cs, float* sn) {
  rotation(cs, sn, rotary, inv_freq, pos);
}

__device__ __forceinline__ float sum_sq8(const float (&x)[8]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += x[i] * x[i];
  return s;
}

__device__ __forceinline__ uint4 bf16x8(const float (&x)[8]) {
  return make_uint4(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]), bf16x2(x[6], x[7]));
}

// P: AttnDecodeArgs, or RowArgs of them (attn_decode_rows: grid.y is the
// rows' most splits, and a row's blocks past its own splits leave at once).
template <int G, typename P>
__global__ void __launch_bounds__(kWarps * 32) attn_split_kernel(const __grid_constant__ P p) {
  const AttnDecodeArgs& a = args_of(p);
  if (int(blockIdx.y) >= a.splits) return;
  TERN_TRACE_BEGIN(TraceKind::attn_split);
  pdl_launch_dependents();
  extern __shared__ uint4 smem[];
  uint4* qf = smem;
  const int kvh = blockIdx.x, split = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  uint4* ring = smem + kQBytes / 16 + size_t(warp) * kStages * kPieces * 32;
  // *pos moves only between steps, so it and the rows below it can be read
  // before the wait.
  const int pos = *a.pos, n = pos + 1, chunks = (n + kChunk - 1) / kChunk;
  const int per = (chunks + a.splits - 1) / a.splits, cb = split * per;
  const int ce = min(chunks, cb + per);
  const int mine = ce - cb > warp ? (ce - cb - warp + kWarps - 1) / kWarps : 0;
  auto chunk = [&](int k) { return cb + warp + k * kWarps; };
  const uint4* K = reinterpret_cast<const uint4*>(a.k_cache + size_t(kvh) * a.capacity * kD);
  const uint4* V = reinterpret_cast<const uint4*>(a.v_cache + size_t(kvh) * a.capacity * kD);
  auto slot = [&](int k) { return ring + (k % kStages) * kPieces * 32; };
  __shared__ uint64_t bars[kWarps][kStages];
  auto bar = [&](int k) { return &bars[warp][k % kStages]; };
  // The first chunks go out before the wait, the new row's too: its stale row
  // is replaced in shared memory below.
  if (lane == 0) {
    for (int k = 0; k < kStages; ++k) mbar_init(bar(k));
    mbar_init_fence();
    for (int k = 0; k < min(kStages, mine); ++k) fetch_chunk(slot(k), K, V, chunk(k), bar(k));
  }
  __syncwarp();
  // The prep: for lane (g, t) and k32 block j = warp + kWarps r, dims
  // 32j + 8t .. +7 of query head g (zero rows past G). The warp that attends
  // the new row's chunk (the last) also makes the row: lane l its dims 8l .. 8l+7.
  const int last = chunks - 1;
  const bool maker = cb <= last && last < ce && (last - cb) % kWarps == warp;
  __shared__ float red[kWarps][8], cs[kD / 2], sn[kD / 2];
  rotation(cs, sn, a.rotary, a.inv_freq, pos);
  auto q_dim = [&](int r) { return 32 * (warp + kWarps * r) + 8 * t; };
  Rope8 qr[kQRounds], kr;
#pragma unroll
  for (int r = 0; r < kQRounds; ++r) qr[r].init(a.q_norm, q_dim(r), a.rotary);
  if (maker) kr.init(a.k_norm, 8 * lane, a.rotary);
  // The maker lane's pieces of the new row, in K's and V's chunk.
  const int k_at = k_piece(pos % kChunk, lane), v_at = v_piece(pos % kChunk, lane);
  const float* kv_in = a.qkv + a.heads * 2 * kD;
  pdl_wait();
  TERN_TRACE_MARK(waited);
  // Every input goes out at once (one round trip to L2).
  float x[kQRounds][8] = {}, xp[kQRounds][8] = {}, k[8] = {}, kp[8] = {}, v[8] = {};
  const float* q_in = a.qkv + (kvh * G + g) * 2 * kD;
#pragma unroll
  for (int r = 0; r < kQRounds; ++r)
    if (g < G) qr[r].load(q_in, q_dim(r), x[r], xp[r]);
  if (maker) {
    kr.load(kv_in + kvh * kD, 8 * lane, k, kp);
    load8(kv_in + (a.kv_heads + kvh) * kD + 8 * lane, v);
  }
  float qq = 0.0f;
#pragma unroll
  for (int r = 0; r < kQRounds; ++r) qq += sum_sq8(x[r]);
  qq += __shfl_xor_sync(kFull, qq, 1);
  qq += __shfl_xor_sync(kFull, qq, 2);
  if (t == 0) red[warp][g] = qq;
  const float kk = maker ? warp_sum(sum_sq8(k)) : 0.0f;  // maker is the whole warp
  __syncthreads();
  uint4 knew = {}, vnew = {};
  if (maker) {  // the new row, into the caches and kept for the attention
    kr.apply(k, kp, rsqrtf(kk * (1.0f / float(kD)) + a.eps), cs, sn);  // kD a power of two
    knew = bf16x8(k), vnew = bf16x8(v);
    const size_t at = (size_t(kvh) * a.capacity + last * kChunk) * kRow;  // the chunk
    reinterpret_cast<uint4*>(a.k_cache)[at + k_at] = knew;
    reinterpret_cast<uint4*>(a.v_cache)[at + v_at] = vnew;
  }
  // q fragments, scaled by log2(e) / sqrt(D), high and low parts.
  float qsum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) qsum += red[w][g];
  const float f = rsqrtf(qsum * (1.0f / float(kD)) + a.eps);
  const float qscale = kLog2e * rsqrtf(float(kD));
#pragma unroll
  for (int r = 0; r < kQRounds; ++r) {
    qr[r].apply(x[r], xp[r], f, cs, sn);
    float h[8], lo[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float q = x[r][i] * qscale;
      h[i] = __bfloat162float(__float2bfloat16_rn(q));
      lo[i] = q - h[i];
    }
    qf[threadIdx.x + kWarps * 32 * r] = bf16x8(h);
    qf[256 + threadIdx.x + kWarps * 32 * r] = bf16x8(lo);
  }
  __syncthreads();
  TERN_TRACE_MARK(staged);
  Running st;
  for (int k = 0; k < mine; ++k) {
    mbar_wait(bar(k), uint32_t(k / kStages) & 1u);
    if (maker && chunk(k) == last) {
      // The new row over what the copy found in the cache (a stale row, or
      // this warp's write of the new one), ordered before the slot's refill.
      uint4* s = slot(k);
      s[k_at] = knew, s[kChunk * kRow + v_at] = vnew;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();
    }
    attend_chunk(st, slot(k), qf, chunk(k) * kChunk, n);
    if (k + kStages < mine) {
      __syncwarp();  // every lane is done with the slot
      if (lane == 0) fetch_chunk(slot(k), K, V, chunk(k + kStages), bar(k));
    }
  }
  __syncthreads();  // the ring becomes the merge scratch
  float* sm_m = reinterpret_cast<float*>(smem + kQBytes / 16);
  float* sm_l = sm_m + kWarps * 8;
  float* sm_o = sm_l + kWarps * 8;  // [warp][head 0..7][kORow]
  st.l += __shfl_xor_sync(kFull, st.l, 1);
  st.l += __shfl_xor_sync(kFull, st.l, 2);
  if (t == 0) sm_m[warp * 8 + g] = st.m, sm_l[warp * 8 + g] = st.l;
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int head = 2 * t + (c & 1), dim = dim_of(g + 8 * (c >> 1), i);
      sm_o[(warp * 8 + head) * kORow + dim] = st.acc[i][c];
    }
  // The warps' weights a head, exp2(m_w - M) (0 for a head no warp saw), once
  // a head rather than once a dim: the merge is instructions, not bytes.
  float* sm_c = sm_o + kWarps * 8 * kORow;  // [warp][head]
  auto part_of = [&](int h) {
    return a.part + (size_t(kvh * G + h) * a.splits + split) * (kD + 2);
  };
  if (int(threadIdx.x) < G) {
    const int h = int(threadIdx.x);
    float M = -INFINITY, L = 0.0f;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w * 8 + h]);
    for (int w = 0; w < kWarps; ++w) {
      const float c = M != -INFINITY ? exp2f(sm_m[w * 8 + h] - M) : 0.0f;
      sm_c[w * 8 + h] = c;
      L += sm_l[w * 8 + h] * c;
    }
    // The combine works in natural-log units.
    float* part = part_of(h);
    part[kD] = M * (1.0f / kLog2e), part[kD + 1] = L;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * kD; idx += kWarps * 32) {
    const int h = idx / kD, d = idx % kD;
    float O = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) O += sm_o[(w * 8 + h) * kORow + d] * sm_c[w * 8 + h];
    part_of(h)[d] = O;
  }
  TERN_TRACE_END();
}

// Merges the splits of one query head, 64 dims a block: four thread groups
// take every fourth split, and every load of a thread (its column of its
// splits, one split's max and sum, the gate) goes out at once, so the merge
// costs one L2 round trip rather than one per few splits.
constexpr int kCombineDims = 64, kCombineGroups = 4,
              kCombineThreads = kCombineDims * kCombineGroups;
static_assert(kCombineThreads >= kMaxAttnSplits, "a thread a split's max and sum");
template <typename P>
__global__ void __launch_bounds__(kCombineThreads)
    attn_combine_kernel(const __grid_constant__ P p) {
  const AttnDecodeArgs& a = args_of(p);
  TERN_TRACE_BEGIN(TraceKind::attn_combine);
  pdl_launch_dependents();
  pdl_wait();
  TERN_TRACE_MARK(waited);
  constexpr int kPer = kMaxAttnSplits / kCombineGroups;
  __shared__ float w[kMaxAttnSplits], red[32], sum[kCombineGroups][kCombineDims];
  const int h = blockIdx.x, i = int(threadIdx.x), n = a.splits;
  const int c = i % kCombineDims, grp = i / kCombineDims, d = blockIdx.y * kCombineDims + c;
  const float* part = a.part + size_t(h) * n * (kD + 2);
  float o[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int s = grp + kCombineGroups * k;
    o[k] = s < n ? part[s * (kD + 2) + d] : 0.0f;
  }
  const float l = i < n ? part[i * (kD + 2) + kD + 1] : 0.0f;
  const float mi = i < n ? part[i * (kD + 2) + kD] : 0.0f;
  const float m = l != 0.0f ? mi : -INFINITY;  // an empty split has l = 0
  const float gate = a.qkv[h * 2 * kD + kD + d];
  // Block max through the scratch (block_sum's pattern, with max).
  float M = warp_max(m);
  if ((i & 31) == 0) red[i >> 5] = M;
  __syncthreads();
  M = red[0];
#pragma unroll
  for (int k = 1; k < kCombineThreads / 32; ++k) M = fmaxf(M, red[k]);
  __syncthreads();
  const float e = l != 0.0f ? expf(m - M) : 0.0f;
  if (i < n) w[i] = e;
  const float L = block_sum(l * e, red);  // its barriers publish w
  float O = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (grp + kCombineGroups * k < n) O += o[k] * w[grp + kCombineGroups * k];
  sum[grp][c] = O;
  __syncthreads();
  if (grp == 0) {
    for (int g = 1; g < kCombineGroups; ++g) O += sum[g][c];
    a.out[h * kD + d] = __fdividef(O, L) * sigmoidf(gate);  // L >= 1: the top split's
  }
  TERN_TRACE_END();
}

}  // namespace

TERN_TRACE_BINDER(attention)

// Power-of-two tiers of 64 positions a split, at most one block per SM (the
// split kernel's ring fills an SM's shared memory).
int attn_splits(int64_t n, int kv_heads) {
  int64_t tier = 64;
  while (tier < n) tier *= 2;
  const int64_t most = std::min(kMaxAttnSplits, std::max(1, sm_count() / std::max(1, kv_heads)));
  return int(std::min<int64_t>(most, std::max<int64_t>(1, tier / 64)));
}

namespace {

// The split kernel for a's query heads per KV head, taking P; null if none.
template <typename P>
void (*split_kernel(const AttnDecodeArgs& a))(P) {
  switch (a.heads / a.kv_heads) {
    case 1:
      return &attn_split_kernel<1, P>;
    case 2:
      return &attn_split_kernel<2, P>;
    case 4:
      return &attn_split_kernel<4, P>;
    case 8:
      return &attn_split_kernel<8, P>;
    default:
      return nullptr;
  }
}

bool attn_takes(const AttnDecodeArgs& a) {
  return a.splits >= 1 && a.splits <= kMaxAttnSplits && a.rotary >= 0 && a.rotary <= kD &&
         a.rotary % 16 == 0 && a.capacity % kKvChunk == 0;  // Rope8, whole chunks
}

}  // namespace

cudaError_t attn_decode(const AttnDecodeArgs& a, cudaStream_t st) {
  auto* split = split_kernel<AttnDecodeArgs>(a);
  if (split == nullptr || !attn_takes(a)) return cudaErrorInvalidValue;
  const dim3 grid(a.kv_heads, a.splits);
  if (cudaError_t e = launch_pdl(split, grid, dim3(kWarps * 32), kSplitSmem, st, a);
      e != cudaSuccess)
    return e;
  return launch_pdl(attn_combine_kernel<AttnDecodeArgs>, dim3(a.heads, kD / kCombineDims),
                    dim3(kCombineThreads), 0, st, a);
}

cudaError_t attn_decode_rows(const AttnDecodeArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  const AttnDecodeArgs& a = rows[0];
  int splits = 0;
  for (int i = 0; i < n; ++i) {
    const AttnDecodeArgs& r = rows[i];
    if (!attn_takes(r) || r.heads != a.heads || r.kv_heads != a.kv_heads)
      return cudaErrorInvalidValue;
    splits = std::max(splits, r.splits);
  }
  using P = RowArgs<AttnDecodeArgs>;
  auto* split = split_kernel<P>(a);
  if (split == nullptr) return cudaErrorInvalidValue;
  const P p = row_args(rows, n);
  const dim3 grid(a.kv_heads, splits, unsigned(n));
  if (cudaError_t e = launch_pdl(split, grid, dim3(kWarps * 32), kSplitSmem, st, p);
      e != cudaSuccess)
    return e;
  return launch_pdl(attn_combine_kernel<P>, dim3(a.heads, kD / kCombineDims, unsigned(n)),
                    dim3(kCombineThreads), 0, st, p);
}

cudaError_t rotation_table(const float* inv_freq, int rotary, int pos, float* cs, float* sn,
                           cudaStream_t st) {
  if (rotary <= 0 || rotary / 2 > 128) return cudaErrorInvalidValue;
  rotation_kernel<<<1, 128, 0, st>>>(inv_freq, rotary, pos, cs, sn);
  return cudaGetLastError();
}

}  // namespace tern::cuda
