// 4-bit GEMV on integer tensor cores: a warp computes 16 rows at a time with
// mma.sync m16n8k32 (u8 weights x s8 activations, exact int32 sums), the
// weights as the A operand and the activation as B, from the tile layout
// (layout.h) in shared memory.
//
// Lane l (g = l/4, t = l%4) reads 16 bytes (32 codes) of rows g and g+8 at
// chunk 4r + t of round r (a round is 128 columns). A word's 8 codes become
// two registers of 4 bytes each, the even codes (w & 0x0F0F0F0F) and the odd
// ones ((w >> 4) & 0x0F0F0F0F): three instructions for 8 weights, where bf16
// pairs took seven, and one mma takes 32 columns instead of 16 (the GEMVs are
// issue-bound). The contraction is order-free, so the activation is staged in
// the matching order instead of moving weights. The activation is split per
// 64-column group into three int8 parts (stage(): fp32-grade). B's 8 columns
// are the round's 2 groups x up to 4 parts (columns 4γ + p see only the k
// slots of group γ's chunks), so the accumulator lane l holds columns 2t,
// 2t+1 of rows g and g+8: group 2r + t/2, two parts, which it scales in fp32:
//   y += s * (scale_p C_p + scale_p+1 C_p+1) + b * X_group   (X once a group).
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/layout.h"

namespace tern::cuda::tile {

constexpr int kRound = kTileRound;  // columns per round
constexpr int kWarps = 16;          // warps per block, splitting K
constexpr int kThreads = kWarps * 32;

// Sums p[w * stride + i] over the first n <= kWarps warps, unrolled in two
// chains so the loads go out together (a loop over a runtime n issued one
// load, add and branch a warp).
__device__ __forceinline__ float warps_sum(const float* p, int stride, int n, int i = 0) {
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; w += 2) {
    if (w < n) s0 += p[w * stride + i];
    if (w + 1 < n) s1 += p[(w + 1) * stride + i];
  }
  return s0 + s1;
}

// One lane's share of one round of a 16-row tile (TileImage::read).
struct Load {
  uint4 q0, q1;       // 32 codes of rows g and g+8
  uint32_t sb0, sb1;  // scale|bias of the group this lane's accumulator holds
};

// A tile's image in shared memory (a ring stage, filled by bulk copies of
// the tile layout, layout.h): `cols` columns of 16 rows, which may come from
// several matrices' tiles one after another (the experts' down: a slot each).
struct TileImage {
  int cols;
  __host__ __device__ uint32_t bytes() const { return uint32_t(cols / kRound) * kTileRoundBytes; }
  // Lane (g, t)'s share of `round`: 32 codes of rows g and g+8 and their
  // group's words, each load contiguous across the warp.
  __device__ Load read(const uint8_t* st, int round) const {
    const int lane = int(threadIdx.x & 31), w = (lane >> 2) * 2 + ((lane & 3) >> 1);
    const uint8_t* r = st + round * kTileRoundBytes;
    Load l;
    l.q0 = reinterpret_cast<const uint4*>(r)[lane];
    l.q1 = reinterpret_cast<const uint4*>(r + 512)[lane];
    l.sb0 = reinterpret_cast<const uint32_t*>(r + 1024)[w];
    l.sb1 = reinterpret_cast<const uint32_t*>(r + 1024)[w + 16];
    return l;
  }
};

// Copies tile `tile` of W (tile layout) to dst on bar. One thread.
__device__ __forceinline__ void copy_tile(const DMat& W, size_t tile, uint8_t* dst, uint64_t* bar) {
  const uint32_t bytes = TileImage{W.cols}.bytes();
  bulk_copy(dst, W.tiles + tile * bytes, bytes, bar);
}

constexpr int kParts = 3;  // int8 parts of the staged activation

// The columns whose staged activation a warp's dot products read: those of
// its rounds (warp w takes rounds w RPW .. w RPW + RPW - 1), [c0, c1).
struct Cols {
  int c0, c1;
};
template <int RPW>
__device__ __forceinline__ Cols warp_cols(int rounds) {
  const int w = int(threadIdx.x >> 5);
  return {min(rounds, w * RPW) * kRound, min(rounds, (w + 1) * RPW) * kRound};
}

// The activation staged for the B operand: per 8 columns and part, the int8
// codes of the even columns and of the odd ones (two words); per group the
// exact sum and the parts' scales.
struct Staged {
  const uint2* part;   // [kParts][K / 8]
  const float* xsum;   // [K / 64]
  const float* scale;  // [kParts][K / 64]
  int K;
  const float* wsq;  // per warp its columns' sum of squares (whole-vector norm), or null
  float eps;
  // The RMSNorm factor that multiplies the finished dot products. Every
  // warp's staging must be past a block barrier.
  __device__ float norm() const {
    return wsq == nullptr ? 1.0f : rsqrtf(warps_sum(wsq, 1, kWarps) * __frcp_rn(float(K)) + eps);
  }
};

// Shared memory stage() needs for K columns, plus `red` floats of reduction space.
constexpr size_t stage_bytes(int K, int red) {
  return size_t(K) * kParts +
         sizeof(float) * ((kParts + 1) * size_t(K / 64) + size_t(kWarps) + size_t(red));
}

// The sum of squares of a word's 8 columns.
__device__ __forceinline__ float sum_sq(const float4& p, const float4& q) {
  return (p.x * p.x + p.y * p.y) + (p.z * p.z + p.w * p.w) + (q.x * q.x + q.y * q.y) +
         (q.z * q.z + q.w * q.w);
}

// The low bytes of four words, a's in the low byte.
__device__ __forceinline__ uint32_t low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040u), __byte_perm(c, d, 0x0040u), 0x5410u);
}

// Copies the warp's columns c of src to dst for stage() by cp.async, each lane
// the words stage() has it read, so the thread's own cp.async wait makes them
// visible to it without a barrier.
__device__ __forceinline__ void stage_copy(float* dst, const float* src, Cols c) {
  for (int v = c.c0 / 8 + int(threadIdx.x & 31); v < c.c1 / 8; v += 32) {
    cp_async16(dst + 8 * v, src + 8 * v);
    cp_async16(dst + 8 * v + 4, src + 8 * v + 4);
  }
}

// Brings the words of x (and of the gate, when there is one) that stage()
// will read for this lane into L1: the next row's while a row is staged.
__device__ __forceinline__ void stage_prefetch(const float* x, const float* gate, Cols mine) {
  for (int v = mine.c0 / 8 + int(threadIdx.x & 31); v < mine.c1 / 8; v += 32) {
    prefetch_l1(x + 8 * v);
    if (gate != nullptr) prefetch_l1(gate + 8 * v);
  }
}

// What stage() does to x before splitting it, fixed at compile time so each
// kernel's staging is straight-line code (no runtime branches or generic
// loads: the kernels are issue-bound):
//   plain:    x as it is;
//   norm:     times norm[k] (the whole-vector RMSNorm, whose factor comes back
//             as Staged::norm);
//   gated:    every norm_group columns (a power of two, 8..128) RMS-normed on
//             their own, times norm[k % norm_group] and gate[k] (SiLU-ed by its
//             producer: the GDN gated norm);
//   weighted: column k times weight[k / per_weight] (the experts' routing
//             weights; per_weight a multiple of 8, given in words of 8).
enum class Prep { plain, norm, gated, weighted };
struct PrepArgs {
  const float* norm = nullptr;
  float eps = 0.0f;
  int norm_group = 0;
  const float* gate = nullptr;
  const float* weight = nullptr;
  FastDiv per_weight;  // words (8 columns) a weight
};

// Stages x ([K], a multiple of 128) as Prep P says. Each 64-column group is
// split into kParts int8 parts, x ~ sum_p scale_p * part_p with scale_0 =
// max|x| / 127 and each next scale 253 times smaller (fp32-grade). RMSNorm is
// a scalar per token, so it is not applied here: its factor, from the sum of
// squares gathered in the same pass, comes back as Staged::norm for the
// finished dot products. Each warp stages just its own columns (mine: those
// its dot products read), so nothing waits for another warp (the kernels are
// issue-bound); a lane takes whole words (8 columns), and the 8
// lanes of a group share its maximum and sum by shuffles. Returns the staged
// view and the `red` floats after it.
template <Prep P>
__device__ inline Staged stage(const float* x, int K, const PrepArgs& pa, float* sm, float** red,
                               Cols mine) {
  uint2* part = reinterpret_cast<uint2*>(sm);
  float* xsum = reinterpret_cast<float*>(part + kParts * (K / 8));
  float* scale = xsum + K / 64;
  float* wsq = scale + kParts * (K / 64);  // [kWarps]
  *red = wsq + kWarps;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* n4 = reinterpret_cast<const float4*>(pa.norm);
  const int lane = int(threadIdx.x & 31);
  float my_sq = 0.0f;  // this thread's words' sum of squares (the whole-vector norm)
  // The gated norm's 1 / norm_group, once (a power of two: exact).
  const float inv_group = P == Prep::gated ? __frcp_rn(float(pa.norm_group)) : 0.0f;
  // The warp goes round together (the shuffles need all lanes); its words
  // start at a multiple of 16 and are a multiple of 16, so a group's lanes
  // (up to 16) are all in or all out.
  for (int base = mine.c0 / 8; base < mine.c1 / 8; base += 32) {
    const int v = base + lane;
    const bool on = v < mine.c1 / 8;
    float4 p = on ? x4[2 * v] : make_float4(0, 0, 0, 0), q = on ? x4[2 * v + 1] : p;
    if constexpr (P == Prep::gated) {
      // The group's words are norm_group / 8 neighbouring lanes.
      float ss = sum_sq(p, q);
      for (int o = 1; o < pa.norm_group / 8; o <<= 1) ss += __shfl_xor_sync(kFull, ss, o);
      const float f = rsqrtf(ss * inv_group + pa.eps);
      if (on) {
        const int c = 8 * v & (pa.norm_group - 1);
        const float4 np = n4[c / 4], nq = n4[c / 4 + 1];
        const float4 gp = reinterpret_cast<const float4*>(pa.gate)[2 * v],
                     gq = reinterpret_cast<const float4*>(pa.gate)[2 * v + 1];
        p = make_float4(p.x * f * np.x * gp.x, p.y * f * np.y * gp.y, p.z * f * np.z * gp.z,
                        p.w * f * np.w * gp.w);
        q = make_float4(q.x * f * nq.x * gq.x, q.y * f * nq.y * gq.y, q.z * f * nq.z * gq.z,
                        q.w * f * nq.w * gq.w);
      }
    } else if constexpr (P == Prep::norm) {
      if (on) {
        my_sq += sum_sq(p, q);
        const float4 np = n4[2 * v], nq = n4[2 * v + 1];
        p = make_float4(p.x * np.x, p.y * np.y, p.z * np.z, p.w * np.w);
        q = make_float4(q.x * nq.x, q.y * nq.y, q.z * nq.z, q.w * nq.w);
      }
    } else if constexpr (P == Prep::weighted) {
      if (on) {
        const float m = pa.weight[pa.per_weight.div(v)];
        p = make_float4(p.x * m, p.y * m, p.z * m, p.w * m);
        q = make_float4(q.x * m, q.y * m, q.z * m, q.w * m);
      }
    }
    float e[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
    float mx = 0.0f, sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(e[i])), sum += e[i];
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
      sum += __shfl_xor_sync(kFull, sum, o);
    }
    // Codes by the magic number: adding 1.5 * 2^23 rounds to an integer held in
    // the low mantissa bits (whose low byte is the int8 code), with no
    // float-int conversions. |codes| <= 127 without clamps: the first part's
    // by its scale, each next one's as its remainder is at most half the last
    // scale and the next scale is 253 times smaller.
    constexpr float kMagic = 12582912.0f;
    // One fast reciprocal, not a division per part: inv_sc is 1/sc to a few
    // ulp, so a code may differ at a near-tie, and the remainder still stays
    // within about half a scale, which the next part absorbs.
    float sc = mx > 0.0f ? mx * (1.0f / 127.0f) : 1.0f;
    float inv_sc = mx > 0.0f ? __fdividef(127.0f, mx) : 1.0f;
#pragma unroll
    for (int k = 0; k < kParts; ++k, sc *= 1.0f / 253.0f, inv_sc *= 253.0f) {
      uint32_t c[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float r = fmaf(e[i], inv_sc, kMagic);
        c[i] = __float_as_uint(r);
        e[i] = fmaf(kMagic - r, sc, e[i]);  // the remainder for the next part
      }
      if (on) {
        part[k * (K / 8) + v] =
            make_uint2(low_bytes(c[0], c[2], c[4], c[6]), low_bytes(c[1], c[3], c[5], c[7]));
        if (v % 8 == 0) scale[k * (K / 64) + v / 8] = sc;
      }
    }
    if (on && v % 8 == 0) xsum[v / 8] = sum;
  }
  // The whole-vector norm: a sum a warp, added up after the block's next
  // barrier (Staged::norm).
  if constexpr (P == Prep::norm) {
    const float s = warp_sum(my_sq);
    if (lane == 0) wsq[threadIdx.x >> 5] = s;
  }
  __syncwarp();
  return {part, xsum, scale, K, P == Prep::norm ? wsq : nullptr, pa.eps};
}

__device__ __forceinline__ void mma(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A lane's B fragments of one round (the same for every tile of the round),
// and for its accumulator's two columns (one group, parts p and p+1) their
// scales and the group's sum (in the part-0 lanes).
struct Fragment {
  uint4 xv[2];
  float X, s0, s1;
};

// B column n = 4 * (group of the round) + part, so lane (g, t) supplies part
// g - 4 (t / 2) of its chunk slot t (when that is a part), and accumulator
// lane (g, t) holds group t / 2, parts 2 (t % 2) and 2 (t % 2) + 1.
// `xchunk`: the staged chunk index of the round's slot 0.
__device__ __forceinline__ Fragment fragment(const Staged& x, int xchunk) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int grp = xchunk / 2 + (t >> 1), p = 2 * (t & 1), mine = g - 4 * (t >> 1);
  Fragment f{};
  if (mine >= 0 && mine < kParts) {
    const uint4* src = reinterpret_cast<const uint4*>(x.part + mine * (x.K / 8));
#pragma unroll
    for (int i = 0; i < 2; ++i) f.xv[i] = src[2 * (xchunk + t) + i];
  }
  f.X = p == 0 ? x.xsum[grp] : 0.0f;
  f.s0 = x.scale[p * (x.K / 64) + grp];
  f.s1 = p + 1 < kParts ? x.scale[(p + 1) * (x.K / 64) + grp] : 0.0f;
  return f;
}

// Adds one round's contribution to this lane's partial sums of rows g and g+8.
// mma j takes word j of either row: its even codes at k slots 4t..4t+3, its
// odd codes at 16+4t..16+4t+3, as the staging ordered the activation.
__device__ __forceinline__ void round_dot(const Load& l, const Fragment& f, float& acc0,
                                          float& acc8) {
  const uint32_t w0[4] = {l.q0.x, l.q0.y, l.q0.z, l.q0.w}, w8[4] = {l.q1.x, l.q1.y, l.q1.z, l.q1.w};
  const uint32_t b[8] = {f.xv[0].x, f.xv[0].y, f.xv[0].z, f.xv[0].w,
                         f.xv[1].x, f.xv[1].y, f.xv[1].z, f.xv[1].w};
  constexpr uint32_t m = 0x0F0F0F0Fu;
  // Two accumulators: chains of two mmas instead of four.
  int e[2][4] = {};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    mma(e[j & 1], w0[j] & m, w8[j] & m, (w0[j] >> 4) & m, (w8[j] >> 4) & m, b[2 * j], b[2 * j + 1]);
  const int d[4] = {e[0][0] + e[1][0], e[0][1] + e[1][1], e[0][2] + e[1][2], e[0][3] + e[1][3]};
  acc0 += sb_scale(l.sb0) * (f.s0 * float(d[0]) + f.s1 * float(d[1])) + sb_bias(l.sb0) * f.X;
  acc8 += sb_scale(l.sb1) * (f.s0 * float(d[2]) + f.s1 * float(d[3])) + sb_bias(l.sb1) * f.X;
}

// Sums a lane's partials over the 4 lanes of its quad (lane t = 0 gets them).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}

}  // namespace tern::cuda::tile
