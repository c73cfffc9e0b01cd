// Gated attention decode: prep (q/k RMSNorm, partial rotate-half RoPE, KV
// append in bf16), split-K GQA attention (each CTA takes one KV head and one
// range of positions; each KV row is read once for all G query heads of the
// group) and the combine, which also applies sigmoid(gate).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/trace.cuh"

namespace tern::cuda {

namespace {

constexpr int kD = kHeadDim;

__global__ void __launch_bounds__(kD) attn_prep_kernel(AttnPrepArgs a) {
  pdl_launch_dependents();
  __shared__ float x[kD], red[32];
  // *pos moves only between steps and the norm weights are constant, so the
  // rotation's angle (powf, and sincosf's slow path past |angle| ~ 1e5) and
  // the weight are ready before the wait, off the attention's path.
  const int h = blockIdx.x, d = threadIdx.x, pos = *a.pos, half = a.rotary / 2;
  const bool is_q = h < a.heads;
  const int kvh = h - a.heads;
  const float nw = is_q ? a.q_norm[d] : a.k_norm[d];
  float cs = 1.0f, sn = 0.0f;
  if (d < a.rotary) {
    const float inv_freq = 1.0f / powf(a.theta, float(2 * (d % half)) / float(a.rotary));
    sincosf(float(pos) * inv_freq, &sn, &cs);
  }
  pdl_wait();
  const float in = is_q ? a.qkv[h * 2 * kD + d] : a.qkv[a.heads * 2 * kD + kvh * kD + d];
  const float ss = block_sum(in * in, red);
  x[d] = in * rsqrtf(ss * (1.0f / float(kD)) + a.eps) * nw;  // kD a power of two
  __syncthreads();
  float r = x[d];
  if (d < a.rotary) r = d < half ? x[d] * cs - x[d + half] * sn : x[d] * cs + x[d - half] * sn;
  if (is_q) {
    a.q[h * kD + d] = r;
    return;
  }
  const size_t row = (size_t(kvh) * a.capacity + pos) * kD + d;
  a.k_cache[row] = __bfloat16_as_ushort(__float2bfloat16_rn(r));
  const float v = a.qkv[a.heads * 2 * kD + a.kv_heads * kD + kvh * kD + d];
  a.v_cache[row] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// The split kernel on tensor cores (mma m16n8k16, bf16 in, fp32 accumulate).
// Each warp takes chunks of 16 positions of one KV head:
//   S^T = Q K^T: A = the G query heads (rows 0-7: bf16 high parts of q, rows
//   8-15: the low parts, so the sum of the two rows keeps ~16 bits of q), B =
//   8 keys; a lane's accumulator is head g's scores of positions 2t, 2t+1.
//   O^T += V^T P^T: A = 16 dims of 16 values, B = the probabilities (high and
//   low parts in two mmas), which are the S accumulators as they stand.
// Contractions are order-free, so every lane fetches whole 16-byte pieces of
// the rows it needs and the fragments follow from them (K: 8 dims per piece for
// two mmas; V: 8 dims of one position, paired across positions with PRMT).
// Each lane copies its own pieces into shared memory with cp.async and reads
// back only those, so a warp's ring of chunks needs no barrier. Chunks of past
// positions are requested before the PDL wait (the cache rows below *pos were
// written by earlier steps); only the chunk holding the new row waits.
constexpr int kWarps = 4;
constexpr int kChunk = 16;    // positions per warp step
constexpr int kStages = 2;    // chunks in flight per warp
constexpr int kPieces = 32;   // 16-byte pieces per lane per chunk: 16 of K, then 16 of V
constexpr int kRow = kD / 8;  // 16-byte pieces per cache row
constexpr size_t kQBytes = 2 * 8 * 32 * 16;  // q fragments: [hi, lo][8 k32 blocks][lane]
constexpr size_t kRingBytes = size_t(kWarps) * kStages * kPieces * 32 * 16;
constexpr size_t kSplitSmem = kQBytes + kRingBytes;
// The ring becomes the merge's scratch: each warp's max, sum, weights and O.
static_assert(kRingBytes >= sizeof(float) * kWarps * 8 * (3 + kD), "merge scratch");
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

// Position offsets within a chunk of the V rows lane quad t fetches (the
// P^T fragment's k slots 2t, 2t+1, 2t+8, 2t+9).
__device__ __forceinline__ int v_offset(int pp, int t) {
  return 2 * t + (pp & 1) + (pp >> 1) * 8;
}

// Requests chunk `c` (positions 16c..16c+15) into `slot`; rows from n on are
// zero-filled. Piece layout: K (n-tile nt, k32 block j) at
// nt * 8 + j; V (position pp, 128-dim half hh, 64-dim half h2) at
// 16 + pp * 4 + hh * 2 + h2.
__device__ __forceinline__ void fetch_chunk(uint4* slot, const uint4* K, const uint4* V, int c,
                                            int n) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, p0 = c * kChunk;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int row = p0 + nt * 8 + g;
    const bool ok = row < n;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      cp_async16(slot + (nt * 8 + j) * 32 + lane, K + size_t(ok ? row : 0) * kRow + j * 4 + t, ok);
  }
#pragma unroll
  for (int pp = 0; pp < 4; ++pp) {
    const int row = p0 + v_offset(pp, t);
    const bool ok = row < n;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
        cp_async16(slot + (16 + pp * 4 + hh * 2 + h2) * 32 + lane,
                   V + size_t(ok ? row : 0) * kRow + hh * 16 + h2 * 8 + g, ok);
  }
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
      mma(s[nt][j & 1], qh.x, ql.x, qh.y, ql.y, k.x, k.y);
      mma(s[nt][j & 1], qh.z, ql.z, qh.w, ql.w, k.z, k.w);
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
      mma(d, a0, a1, a2, a3, bh[0], bh[1]);
      mma(d, a0, a1, a2, a3, bl[0], bl[1]);
    }
  }
}

template <int G>
__global__ void __launch_bounds__(kWarps * 32) attn_split_kernel(AttnDecodeArgs a) {
  TERN_TRACE_BEGIN(TraceKind::attn_split);
  pdl_launch_dependents();
  extern __shared__ uint4 smem[];
  uint4* qf = smem;
  const int kvh = blockIdx.x, split = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
  int early = 0;
  for (; early < kStages && early < mine && (chunk(early) + 1) * kChunk <= pos; ++early) {
    fetch_chunk(slot(early), K, V, chunk(early), n);
    cp_async_commit();
  }
  pdl_wait();
  TERN_TRACE_MARK(waited);
  // q fragments, scaled by log2(e) / sqrt(D): for lane (g, t) and k32 block j,
  // dims 32j + 8t .. +7 of head g (zero rows past G), high and low parts.
  const float qscale = kLog2e * rsqrtf(float(kD));
  for (int idx = threadIdx.x; idx < 8 * 32; idx += kWarps * 32) {
    const int j = idx / 32, l = idx % 32, g = l >> 2, t = l & 3;
    float h[8] = {}, lo[8] = {};
    if (g < G) {
      // Two 16-byte loads (the 8 dims are contiguous), not eight.
      const float4* q4 = reinterpret_cast<const float4*>(a.q + (kvh * G + g) * kD + 32 * j + 8 * t);
      const float4 qa = q4[0], qb = q4[1];
      const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float q = qv[i] * qscale;
        h[i] = __bfloat162float(__float2bfloat16_rn(q));
        lo[i] = q - h[i];
      }
    }
    qf[idx] =
        make_uint4(bf16x2(h[0], h[1]), bf16x2(h[2], h[3]), bf16x2(h[4], h[5]), bf16x2(h[6], h[7]));
    qf[256 + idx] = make_uint4(bf16x2(lo[0], lo[1]), bf16x2(lo[2], lo[3]), bf16x2(lo[4], lo[5]),
                               bf16x2(lo[6], lo[7]));
  }
  __syncthreads();
  TERN_TRACE_MARK(staged);
  for (int k = early; k < kStages; ++k) {
    if (k < mine) fetch_chunk(slot(k), K, V, chunk(k), n);
    cp_async_commit();
  }
  Running st;
  for (int k = 0; k < mine; ++k) {
    cp_async_wait<kStages - 1>();
    attend_chunk(st, slot(k), qf, chunk(k) * kChunk, n);
    if (k + kStages < mine) fetch_chunk(slot(k), K, V, chunk(k + kStages), n);
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring becomes the merge scratch
  float* sm_m = reinterpret_cast<float*>(smem + kQBytes / 16);
  float* sm_l = sm_m + kWarps * 8;
  float* sm_o = sm_l + kWarps * 8;  // [warp][head 0..7][kD]
  const int g = lane >> 2, t = lane & 3;
  st.l += __shfl_xor_sync(kFull, st.l, 1);
  st.l += __shfl_xor_sync(kFull, st.l, 2);
  if (t == 0) sm_m[warp * 8 + g] = st.m, sm_l[warp * 8 + g] = st.l;
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int head = 2 * t + (c & 1), dim = dim_of(g + 8 * (c >> 1), i);
      sm_o[(warp * 8 + head) * kD + dim] = st.acc[i][c];
    }
  // The warps' weights a head, exp2(m_w - M) (0 for a head no warp saw), once
  // a head rather than once a dim: the merge is instructions, not bytes.
  float* sm_c = sm_o + kWarps * 8 * kD;  // [warp][head]
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
    for (int w = 0; w < kWarps; ++w) O += sm_o[(w * 8 + h) * kD + d] * sm_c[w * 8 + h];
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
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(AttnDecodeArgs a) {
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

cudaError_t attn_prep(const AttnPrepArgs& a, cudaStream_t st) {
  return launch_pdl(attn_prep_kernel, dim3(a.heads + a.kv_heads), dim3(kD), 0, st, a);
}

// Power-of-two tiers of 64 positions a split, at most one block per SM (the
// split kernel's ring fills an SM's shared memory).
int attn_splits(int64_t n, int kv_heads) {
  int64_t tier = 64;
  while (tier < n) tier *= 2;
  const int64_t most = std::min(kMaxAttnSplits, std::max(1, sm_count() / std::max(1, kv_heads)));
  return int(std::min<int64_t>(most, std::max<int64_t>(1, tier / 64)));
}

cudaError_t attn_decode(const AttnDecodeArgs& a, cudaStream_t st) {
  void (*split)(AttnDecodeArgs) = nullptr;
  switch (a.heads / a.kv_heads) {  // query heads per KV head
    case 1:
      split = &attn_split_kernel<1>;
      break;
    case 2:
      split = &attn_split_kernel<2>;
      break;
    case 4:
      split = &attn_split_kernel<4>;
      break;
    case 8:
      split = &attn_split_kernel<8>;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (a.splits < 1 || a.splits > kMaxAttnSplits) return cudaErrorInvalidValue;
  const dim3 grid(a.kv_heads, a.splits);
  if (cudaError_t e = launch_pdl(split, grid, dim3(kWarps * 32), kSplitSmem, st, a);
      e != cudaSuccess)
    return e;
  return launch_pdl(attn_combine_kernel, dim3(a.heads, kD / kCombineDims), dim3(kCombineThreads), 0,
                    st, a);
}

}  // namespace tern::cuda
