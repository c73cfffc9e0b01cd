// The kernels in plain C++, written so that compilers vectorise them (fixed
// lane counts, independent accumulators). Each ISA's translation unit includes
// this file inside its own namespace and compiles it with its own flags; every
// table brings its own matmul of the pack16.h records, and the SIMD ones their
// own 4-bit matmul of plain rows (gemm_q4 here is the portable one).
// Not a public header: include it only from a kernels_<isa>.cpp (its functions
// have internal linkage, so each translation unit keeps its own build of them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/bf16.h"
#include "core/error.h"

namespace {
namespace generic {

using namespace tern;
using namespace tern::cpu;

constexpr int kLanes = 16;  // independent accumulators of the integer sums

// A per-thread buffer of n elements (Tag tells call sites apart): up to kFixed
// in static thread storage, sized for rows up to the model's widest (4096
// inputs), so the first item a pool thread runs allocates nothing (decode
// allocates nothing per token); wider ones, which no preset has, on the heap.
constexpr int64_t kWidestRow = 4096;
template <class Tag, class T, size_t kFixed>
T* thread_buffer(size_t n) {
  alignas(64) thread_local T fixed[kFixed];
  thread_local std::vector<T> wide;
  if (n <= kFixed) return fixed;
  if (wide.size() < n) wide.resize(n);
  return wide.data();
}

// 8 floats as one value (GCC/Clang vector extension: AVX registers where the
// translation unit has AVX, two SSE or NEON registers where it has not).
typedef float V8 __attribute__((vector_size(32)));

// 8 floats at any float's address, readable through any type: a load or store
// through it is one unaligned vector move (a memcpy into a V8 in an array
// became two 16-byte stores and a 32-byte reload with AVX2, which stalls).
typedef float V8u __attribute__((vector_size(32), aligned(4), may_alias));

// (A V8 out-parameter, not a return value: a 32-byte vector returned by value
// has an ABI of its own without AVX.)
inline void load8(V8& v, const float* p) {
  v = *reinterpret_cast<const V8u*>(p);
}

typedef int32_t V8i __attribute__((vector_size(32)));

inline void store8(float* p, const V8& v) {
  *reinterpret_cast<V8u*>(p) = v;
}

// exp(x) for 8 lanes (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for e^r, 2^n through the exponent bits): within 2 ulp of
// std::exp on [-87, 88]; x is clamped to that range first (what silu and the
// softmax take it for: exp(-87) is 0 beside 1, exp(88) infinite beside x).
// In place: a V8 returned by value has an ABI of its own without AVX.
inline void exp8(V8& x) {
  x = x > 88.0f ? V8{} + 88.0f : x;
  x = x < -87.0f ? V8{} + -87.0f : x;
  const V8 t = x * 1.44269504f + 0.5f;
  V8 n = __builtin_convertvector(__builtin_convertvector(t, V8i), V8);
  n = n > t ? n - 1.0f : n;  // floor
  const V8 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V8 p = V8{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const V8i bits = (__builtin_convertvector(n, V8i) + 127) << 23;
  V8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  x = p * scale;
}

// out[i] = silu(s[i]) * m[i] (m null: 1); out may be s or m.
void silu_mul(const float* s, const float* m, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    V8 a, b = V8{} + 1.0f;
    load8(a, s + i);
    if (m) load8(b, m + i);
    V8 e = -a;
    exp8(e);
    store8(out + i, a / (1.0f + e) * b);
  }
  for (; i < n; ++i) out[i] = s[i] / (1.0f + std::exp(-s[i])) * (m ? m[i] : 1.0f);
}

// Sum of a[i] * b[i] in two vector accumulators.
inline float dot(const float* a, const float* b, int64_t n) {
  V8 acc0 = {}, acc1 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V8 a0, a1, b0, b1;
    load8(a0, a + i);
    load8(a1, a + i + 8);
    load8(b0, b + i);
    load8(b1, b + i + 8);
    acc0 += a0 * b0;
    acc1 += a1 * b1;
  }
  acc0 += acc1;
  float s = 0.0f;
  for (int l = 0; l < 8; ++l) s += acc0[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Group scales and biases of row r as floats.
inline void group_params(const QTensor& w, int64_t r, float* sc, float* bi) {
  const size_t G = w.groups_per_row(), g0 = size_t(r) * G;
  for (size_t g = 0; g < G; ++g) {
    sc[g] = load_scalar(w.dtype, w.scales, g0 + g);
    bi[g] = load_scalar(w.dtype, w.biases, g0 + g);
  }
}

// Where each input of a block of 4 groups goes within the block's 256 codes.
struct BlockOffsets {
  uint8_t at[kBlockGroups * kGroup];
  constexpr BlockOffsets() : at() {
    for (int g = 0; g < kBlockGroups; ++g)
      for (int i = 0; i < kGroup; ++i)
        at[g * kGroup + i] = uint8_t(code_offset(kBlockGroups, g, i));
  }
};
constexpr BlockOffsets kBlockOffsets;

// Per group: max |x| and the sum in 8 lanes (the same lane arithmetic in every
// translation unit, so every ISA gets the same scale, sum and codes), the codes
// rounded to nearest even, then placed by the layout.
void quantize(const float* x, int64_t cols, int8_t* q, float* d, float* s) {
  const int64_t G = cols / kGroup, GB = G / kBlockGroups * kBlockGroups;
  for (int64_t g = 0; g < G; ++g) {
    const float* xg = x + g * kGroup;
    V8 m = {}, sum8 = {};
    for (int i = 0; i < kGroup; i += 8) {
      V8 v;
      load8(v, xg + i);
      sum8 += v;
      const V8 a = v < 0.0f ? -v : v;
      m = a > m ? a : m;
    }
    float amax = 0.0f, sum = 0.0f;
    for (int l = 0; l < 8; ++l) {
      amax = std::max(amax, m[l]);
      sum += sum8[l];
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int8_t codes[kGroup];
    for (int i = 0; i < kGroup; ++i) codes[i] = int8_t(std::nearbyint(xg[i] * inv));
    if (g < GB) {
      int8_t* block = q + (g - g % kBlockGroups) * kGroup;
      const uint8_t* at = kBlockOffsets.at + (g % kBlockGroups) * kGroup;
      for (int i = 0; i < kGroup; ++i) block[at[i]] = codes[i];
    } else {
      for (int i = 0; i < kGroup; ++i) q[code_offset(G, g, i)] = codes[i];
    }
    d[g] = amax / 127.0f;
    s[g] = sum;
  }
}

// The portable 4-bit kernel: per block of rows and token, the token's codes
// back in input order, then one row at a time.
void gemm_q4(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
             const OutRows& o) {
  constexpr int64_t kRows = 64;
  const int64_t G = int64_t(w.groups_per_row());
  struct Params;
  struct Codes;
  float* params =
      thread_buffer<Params, float, 2 * kRows * kWidestRow / kGroup>(size_t(2 * G * kRows));
  int8_t* codes = thread_buffer<Codes, int8_t, kWidestRow>(size_t(w.cols));
  for (int64_t b0 = r0; b0 < r1; b0 += kRows) {
    const int64_t b1 = std::min(r1, b0 + kRows);
    for (int64_t r = b0; r < b1; ++r) {
      float* p = params + 2 * G * (r - b0);
      group_params(w, r, p, p + G);
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t xr = x.index ? x.index[t] : t;
      const int8_t* xq = x.q + xr * x.cols;
      const float* xd = x.d + xr * G;
      const float* xs = x.s + xr * G;
      for (int64_t g = 0; g < G; ++g)
        for (int i = 0; i < kGroup; ++i) codes[size_t(g * kGroup + i)] = xq[code_offset(G, g, i)];
      for (int64_t r = b0; r < b1; ++r) {
        const uint8_t* row = w.data + size_t(r) * w.row_bytes();
        const float *sc = params + 2 * G * (r - b0), *bi = sc + G;
        float total = 0.0f;
        for (int64_t g = 0; g < G; ++g) {
          const uint8_t* wg = row + g * (kGroup / 2);
          const int8_t* cg = codes + g * kGroup;
          int32_t acc[kLanes] = {};
          for (int b = 0; b < kGroup / 2; b += kLanes)
            for (int l = 0; l < kLanes; ++l)
              acc[l] += int32_t(wg[b + l] & 15) * cg[2 * (b + l)] +
                        int32_t(wg[b + l] >> 4) * cg[2 * (b + l) + 1];
          int32_t isum = 0;
          for (int l = 0; l < kLanes; ++l) isum += acc[l];
          total += sc[g] * xd[g] * float(isum) + bi[g] * xs[g];
        }
        o.put(t, r, total);
      }
    }
  }
}

// Row r of any matrix as floats (vectorised for 8-bit affine and bf16).
void expand_row(const QTensor& w, int64_t r, float* out) {
  if (w.quantized() && w.bits == 8) {
    const uint8_t* codes = w.data + size_t(r) * w.row_bytes();
    const int64_t G = int64_t(w.groups_per_row());
    for (int64_t g = 0; g < G; ++g) {
      const float s = load_scalar(w.dtype, w.scales, size_t(r * G + g));
      const float b = load_scalar(w.dtype, w.biases, size_t(r * G + g));
      for (int i = 0; i < w.group; ++i)
        out[g * w.group + i] = s * float(codes[g * w.group + i]) + b;
    }
  } else if (!w.quantized() && w.dtype == DType::bf16) {
    const auto* h = reinterpret_cast<const uint16_t*>(w.data + size_t(r) * w.row_bytes());
    for (int64_t i = 0; i < w.cols; ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    w.dequant_row(r, out);
  }
}

// out[i][j] = a[i] . b[j] for 4 rows and 2 tokens, in 8 vector accumulators
// (n a multiple of 8).
void dots_4x2(const float* const* a, const float* const* b, int64_t n, float (&out)[4][2]) {
  V8 acc[4][2] = {};
  for (int64_t k = 0; k < n; k += 8) {
    V8 b0, b1;
    load8(b0, b[0] + k);
    load8(b1, b[1] + k);
    for (int i = 0; i < 4; ++i) {
      V8 ai;
      load8(ai, a[i] + k);
      acc[i][0] += ai * b0;
      acc[i][1] += ai * b1;
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      float sum = 0.0f;
      for (int l = 0; l < 8; ++l) sum += acc[i][j][l];
      out[i][j] = sum;
    }
}

// One of dots_4x2's dots alone, in the same arithmetic: a dot's value never
// depends on the rows and tokens beside it (a decode step's row as alone).
float dot_1x1(const float* a, const float* b, int64_t n) {
  V8 acc = {};
  for (int64_t k = 0; k < n; k += 8) {
    V8 ak, bk;
    load8(ak, a + k);
    load8(bk, b + k);
    acc += ak * bk;
  }
  float sum = 0.0f;
  for (int l = 0; l < 8; ++l) sum += acc[l];
  return sum;
}

// Rows expanded 4 at a time into a buffer, dotted with the tokens 2 at a time
// (the 8-bit router's 256 rows over a 512-token prompt: 3x the speed of one
// dot at a time); what is left over one dot at a time, in the same arithmetic.
void gemm_f32(const QTensor& w, int64_t r0, int64_t r1, const FRows& x, int64_t T,
              const OutRows& o) {
  const int64_t n = w.cols;
  struct Rows;
  const std::span<float> rows(thread_buffer<Rows, float, 4 * kWidestRow>(size_t(4 * n)),
                              size_t(4 * n));
  auto token = [&](int64_t t) { return x.x + x.ld * (x.index ? x.index[t] : t); };
  for (int64_t b0 = r0; b0 < r1; b0 += 4) {
    const int64_t nr = std::min<int64_t>(4, r1 - b0);
    for (int64_t i = 0; i < nr; ++i) expand_row(w, b0 + i, rows.data() + i * n);
    const bool lanes = n % 8 == 0;
    int64_t t = 0;
    if (nr == 4 && lanes)
      for (; t + 2 <= T; t += 2) {
        const float* a[4] = {rows.data(), rows.data() + n, rows.data() + 2 * n,
                             rows.data() + 3 * n};
        const float* b[2] = {token(t), token(t + 1)};
        float out[4][2];
        dots_4x2(a, b, n, out);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 2; ++j) o.put(t + j, b0 + i, out[i][j]);
      }
    for (; t < T; ++t)
      for (int64_t i = 0; i < nr; ++i) {
        const float* r = rows.data() + i * n;
        o.put(t, b0 + i, lanes ? dot_1x1(r, token(t), n) : dot(r, token(t), n));
      }
  }
}

inline void store_c(float* c, float beta, float alpha, float acc) {
  *c = beta == 0.0f ? alpha * acc : beta * *c + alpha * acc;
}

// One 4 x 16 tile of gemm_nn in eight vector accumulators, from packed
// panels: ap[k][0..4) and bp[k][0..16).
void nn_tile(int K, float alpha, const float* ap, const float* bp, float beta, float* c,
             int64_t ldc) {
  V8 acc[4][2] = {};
  for (int k = 0; k < K; ++k) {
    V8 b0, b1;
    load8(b0, bp + 16 * k);
    load8(b1, bp + 16 * k + 8);
    for (int i = 0; i < 4; ++i) {
      acc[i][0] += ap[4 * k + i] * b0;
      acc[i][1] += ap[4 * k + i] * b1;
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 16; ++j) store_c(c + i * ldc + j, beta, alpha, acc[i][j / 8][j % 8]);
}

// C = beta C + alpha A B with A(i, k) = a[i * ars + k * acs], B(k, j) = b[k *
// bks + j * bjs], C(i, j) = c[i * ldc + j]: 4 x 16 register tiles over panels
// of A and B packed contiguous first (the operands' rows are 512 B to 2 KB
// apart, which maps an unpacked panel's lines onto a few L1 sets: ~3x
// slower), the edges by plain loops.
void gemm_strided(int M, int N, int K, float alpha, const float* a, int64_t ars, int64_t acs,
                  const float* b, int64_t bks, int64_t bjs, float beta, float* c, int64_t ldc) {
  constexpr int MR = 4, NR = 16;
  const int M4 = M / MR * MR, N16 = N / NR * NR;
  if (M4 > 0 && N16 > 0) {
    thread_local std::vector<float> pack;
    if (pack.size() < size_t(M4 + NR) * size_t(K)) pack.resize(size_t(M4 + NR) * size_t(K));
    float *ap = pack.data(), *bp = ap + size_t(M4) * size_t(K);
    for (int i0 = 0; i0 < M4; i0 += MR)
      for (int k = 0; k < K; ++k)
        for (int i = 0; i < MR; ++i) ap[i0 * K + MR * k + i] = a[(i0 + i) * ars + k * acs];
    for (int j0 = 0; j0 < N16; j0 += NR) {
      if (bjs == 1)
        for (int k = 0; k < K; ++k) std::memcpy(bp + NR * k, b + k * bks + j0, NR * sizeof(float));
      else
        for (int j = 0; j < NR; ++j)
          for (int k = 0; k < K; ++k) bp[NR * k + j] = b[k * bks + (j0 + j) * bjs];
      for (int i0 = 0; i0 < M4; i0 += MR)
        nn_tile(K, alpha, ap + i0 * K, bp, beta, c + i0 * ldc + j0, ldc);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int j = i < M4 ? N16 : 0; j < N; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += a[i * ars + k * acs] * b[k * bks + j * bjs];
      store_c(c + i * ldc + j, beta, alpha, acc);
    }
}

// C = beta C + alpha A B, B(k, j) = b[k * ldb + j].
void gemm_nn(int M, int N, int K, float alpha, const float* a, int64_t ars, int64_t acs,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_strided(M, N, K, alpha, a, ars, acs, b, ldb, 1, beta, c, ldc);
}

// C = beta C + alpha A B^T with A(i, k) = a[i * lda + k], B(j, k) = b[j * ldb + k].
void gemm_nt(int M, int N, int K, float alpha, const float* a, int64_t lda, const float* b,
             int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_strided(M, N, K, alpha, a, lda, 1, b, 1, ldb, beta, c, ldc);
}

// S <- alpha S; u = beta (v - S^T k); S += k u^T; o = S^T q. Each column of S
// evolves on its own, so a block of NJ columns goes through all T tokens while
// it stays in cache, and one pass per token reads and writes it (the decay
// folded in). Whole 128-column rows, then 32 columns at a time: decode streams
// each state's rows in order (`cpu_kernels delta`, the 35b-a3b's 60 MB of
// state on the Zen 5 VM: 2.65 ms a token, 4.2 ms in blocks of 32 columns).
template <int NJ>
void delta_columns(const DeltaArgs& a, int j0) {
  const int dk = a.dk, dv = a.dv;
  for (int64_t t = 0; t < a.T; ++t) {
    const float *k = a.k + t * dk, *q = a.q + t * dk, *v = a.v + t * dv + j0;
    const float alpha = std::exp(a.g[t]), beta = a.beta[t];
    float r[NJ] = {}, u[NJ], o[NJ] = {};
    for (int i = 0; i < dk; ++i) {
      const float* Si = a.S + i * dv + j0;
      for (int j = 0; j < NJ; ++j) r[j] += Si[j] * k[i];
    }
    for (int j = 0; j < NJ; ++j) u[j] = beta * (v[j] - alpha * r[j]);
    for (int i = 0; i < dk; ++i) {
      float* Si = a.S + i * dv + j0;
      const float ki = k[i], qi = q[i];
      for (int j = 0; j < NJ; ++j) {
        Si[j] = alpha * Si[j] + ki * u[j];
        o[j] += qi * Si[j];
      }
    }
    std::copy(o, o + NJ, a.o + t * dv + j0);
  }
}

void delta_recurrent(const DeltaArgs& a) {
  int j0 = 0;
  for (; j0 + 128 <= a.dv; j0 += 128) delta_columns<128>(a, j0);
  for (; j0 + 32 <= a.dv; j0 += 32) delta_columns<32>(a, j0);
  for (; j0 < a.dv; ++j0) delta_columns<1>(a, j0);
}

// The chunked form (docs/model.md §DeltaNet chunked) in 64-token chunks as small GEMMs. The
// decays exp(gam_r - gam_s) are computed once a chunk, by rows; the forward
// substitution (I + A) X = [diag(beta) V | diag(beta Gamma) K] goes 8 rows at
// a time: what the rows above the block contribute is one GEMM, the block's
// own triangle a few axpys.
void delta_chunked(const DeltaArgs& a) {
  constexpr int C = 64, B = 8;
  const int dk = a.dk, dv = a.dv, w = dv + dk;
  thread_local std::vector<float> buf;
  const size_t need = size_t(C) * (1 + 2 * C + size_t(w) + size_t(dk));
  if (buf.size() < need) buf.resize(need);
  float* gam = buf.data();
  float* E = gam + C;     // [C][C]: exp(gam_r - gam_s), s <= r
  float* KK = E + C * C;  // [C][C]: -A (strict lower), then the decayed causal Q K^T
  float* X = KK + C * C;  // [C][w]: U | W, then V' in U's place
  float* Kd = X + C * w;  // [C][dk]
  for (int64_t c0 = 0; c0 < a.T; c0 += C) {
    const int L = int(std::min<int64_t>(C, a.T - c0));
    const float *q = a.q + c0 * dk, *k = a.k + c0 * dk, *v = a.v + c0 * dv;
    float acc = 0.0f;
    for (int r = 0; r < L; ++r) gam[r] = acc += a.g[c0 + r];
    // Row r of the decays is row r - 1 times exp(g_r) (no exp a pair).
    for (int r = 0; r < L; ++r) {
      const float alpha = std::exp(a.g[c0 + r]);
      for (int s = 0; s < r; ++s) E[r * C + s] = alpha * E[(r - 1) * C + s];
      E[r * C + r] = 1.0f;
    }
    gemm_nt(L, L, dk, 1.0f, k, dk, k, dk, 0.0f, KK, C);
    for (int r = 0; r < L; ++r) {
      const float b = a.beta[c0 + r], bg = b * std::exp(gam[r]);
      for (int s = 0; s < r; ++s) KK[r * C + s] *= -b * E[r * C + s];
      float* xr = X + r * w;
      for (int j = 0; j < dv; ++j) xr[j] = b * v[r * dv + j];
      for (int i = 0; i < dk; ++i) xr[dv + i] = bg * k[r * dk + i];
    }
    for (int r0 = 0; r0 < L; r0 += B) {
      const int nb = std::min(B, L - r0);
      if (r0 > 0) gemm_nn(nb, w, r0, 1.0f, KK + r0 * C, C, 1, X, w, 1.0f, X + r0 * w, w);
      for (int r = r0; r < r0 + nb; ++r)
        for (int s = r0; s < r; ++s) axpy(KK[r * C + s], X + s * w, X + r * w, w);
    }
    // V' = U - W S0 (in U's columns of X).
    gemm_nn(L, dv, dk, -1.0f, X + dv, w, 1, a.S, dv, 1.0f, X, w);
    // O = diag(exp(gam)) Q S0 + (Q K^T * decay, causal) V'.
    float* o = a.o + c0 * dv;
    gemm_nn(L, dv, dk, 1.0f, q, dk, 1, a.S, dv, 0.0f, o, dv);
    gemm_nt(L, L, dk, 1.0f, q, dk, k, dk, 0.0f, KK, C);
    for (int r = 0; r < L; ++r) {
      const float G = std::exp(gam[r]);
      for (int j = 0; j < dv; ++j) o[r * dv + j] *= G;
      for (int s = 0; s < L; ++s) KK[r * C + s] = s <= r ? KK[r * C + s] * E[r * C + s] : 0.0f;
    }
    gemm_nn(L, dv, L, 1.0f, KK, C, 1, X, w, 1.0f, o, dv);
    // S = exp(gam_L) S0 + sum_r exp(gam_L - gam_r) k_r (x) V'_r.
    const float GC = std::exp(gam[L - 1]);
    for (int r = 0; r < L; ++r) {
      const float d = E[(L - 1) * C + r];
      for (int i = 0; i < dk; ++i) Kd[r * dk + i] = d * k[r * dk + i];
    }
    gemm_nn(dk, dv, L, 1.0f, Kd, 1, dk, X, w, GC, a.S, dv);
  }
}

inline float hsum8(const V8& v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// s[j] = exp(s[j] - mx) for j < n (vectorised exp8: 2 ulp); returns their sum.
float exp_shifted(float* s, int64_t n, float mx) {
  V8 acc{};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    V8 x;
    load8(x, s + j);
    x -= mx;
    exp8(x);
    store8(s + j, x);
    acc += x;
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += s[j] = std::exp(s[j] - mx);
  return sum + hsum8(acc);
}

// out[r][j] = q[r] . k[j] for NR rows and NK keys of hd floats: NR x NK
// independent sums, each load of a key's 8 floats serving NR rows.
template <int NR, int NK>
void dots(const float* const* q, const float* const* k, int hd, float* out, int64_t ld_out) {
  V8 acc[NR][NK] = {};
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    V8 kv[NK], qv;
    for (int j = 0; j < NK; ++j) load8(kv[j], k[j] + d);
    for (int r = 0; r < NR; ++r) {
      load8(qv, q[r] + d);
      for (int j = 0; j < NK; ++j) acc[r][j] += qv * kv[j];
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NK; ++j) {
      float tail = 0.0f;
      for (int e = d; e < hd; ++e) tail += q[r][e] * k[j][e];
      out[r * ld_out + j] = hsum8(acc[r][j]) + tail;
    }
}

// S[r][j] = scale Q[r] . K[j] for few rows R (decode: one query's 8 heads of
// a GQA group), reading each key row once for every 2 rows (a GEMM would first
// copy the block of K into panels, for too few rows to repay it).
void scores_few_rows(int R, int nk, int hd, float scale, const float* Q, const float* k, int64_t ld,
                     float* S) {
  for (int r = 0; r < R; r += 2) {
    const float* q[2] = {Q + r * hd, Q + (r + 1) * hd};
    float* out = S + r * kAttnKeyBlock;
    int j = 0;
    for (; j + 4 <= nk; j += 4) {
      const float* kr[4] = {k + j * ld, k + (j + 1) * ld, k + (j + 2) * ld, k + (j + 3) * ld};
      if (r + 1 < R)
        dots<2, 4>(q, kr, hd, out + j, kAttnKeyBlock);
      else
        dots<1, 4>(q, kr, hd, out + j, kAttnKeyBlock);
    }
    for (; j < nk; ++j) {
      const float* kr[1] = {k + j * ld};
      if (r + 1 < R)
        dots<2, 1>(q, kr, hd, out + j, kAttnKeyBlock);
      else
        dots<1, 1>(q, kr, hd, out + j, kAttnKeyBlock);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < nk; ++j) S[r * kAttnKeyBlock + j] *= scale;
}

// o[r] += sum_j P[r][j] V[j] for NR rows, 16 of hd's floats at a time held
// in registers over the block's keys.
template <int NR>
void values_rows(const float* P, int nk, int hd, const float* v, int64_t ld, float* o) {
  int d = 0;
  for (; d + 16 <= hd; d += 16) {
    V8 acc[NR][2];
    for (int r = 0; r < NR; ++r) {
      load8(acc[r][0], o + r * hd + d);
      load8(acc[r][1], o + r * hd + d + 8);
    }
    for (int j = 0; j < nk; ++j) {
      V8 v0, v1;
      load8(v0, v + j * ld + d);
      load8(v1, v + j * ld + d + 8);
      for (int r = 0; r < NR; ++r) {
        const float p = P[r * kAttnKeyBlock + j];
        acc[r][0] += p * v0;
        acc[r][1] += p * v1;
      }
    }
    for (int r = 0; r < NR; ++r) {
      store8(o + r * hd + d, acc[r][0]);
      store8(o + r * hd + d + 8, acc[r][1]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < nk; ++j)
      for (int e = d; e < hd; ++e) o[r * hd + e] += P[r * kAttnKeyBlock + j] * v[j * ld + e];
}

// o[r] += sum_j P[r][j] V[j] for few rows R, 4 at a time.
void values_few_rows(int R, int nk, int hd, const float* P, const float* v, int64_t ld, float* o) {
  int r = 0;
  for (; r + 4 <= R; r += 4) values_rows<4>(P + r * kAttnKeyBlock, nk, hd, v, ld, o + r * hd);
  for (; r < R; ++r) values_rows<1>(P + r * kAttnKeyBlock, nk, hd, v, ld, o + r * hd);
}

// Online softmax over key blocks: the queries packed into R = nq x heads rows
// once, so that each block's scores are one gemm_nt of R rows (a GQA group
// of 2 heads alone is too few rows for the GEMM's tiles), P V by gemm_nn;
// up to kFewRows rows (decode) by the direct loops above.
void attention(const AttnArgs& a) {
  constexpr int64_t kFewRows = 16;
  const int64_t R = a.nq * a.heads;
  const int hd = a.hd;
  float* S = a.scratch;              // [R][kAttnKeyBlock]
  float* Q = S + R * kAttnKeyBlock;  // [R][hd]
  for (int64_t i = 0; i < a.nq; ++i)
    for (int h = 0; h < a.heads; ++h)
      std::copy(a.q + i * a.q_ld + h * a.q_hs, a.q + i * a.q_ld + h * a.q_hs + hd,
                Q + (i * a.heads + h) * hd);
  std::fill(a.m, a.m + R, -INFINITY);
  std::fill(a.l, a.l + R, 0.0f);
  std::fill(a.o, a.o + R * hd, 0.0f);
  const int64_t last = a.pos0 + a.nq - 1;  // the last query's position
  for (int64_t kb = a.k0; kb < a.k1 && kb <= last; kb += kAttnKeyBlock) {
    const int nk = int(std::min<int64_t>(kAttnKeyBlock, a.k1 - kb));
    const float *kblock = a.k + kb * a.kv_ld, *vblock = a.v + kb * a.kv_ld;
    if (R <= kFewRows)
      scores_few_rows(int(R), nk, hd, a.scale, Q, kblock, a.kv_ld, S);
    else
      gemm_nt(int(R), nk, hd, a.scale, Q, hd, kblock, a.kv_ld, 0.0f, S, kAttnKeyBlock);
    for (int64_t i = 0; i < a.nq; ++i) {
      const int64_t visible = std::clamp<int64_t>(a.pos0 + i - kb + 1, 0, nk);
      for (int h = 0; h < a.heads; ++h) {
        const int64_t row = i * a.heads + h;
        float* s = S + row * kAttnKeyBlock;
        float mx = a.m[row];
        for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, s[j]);
        if (visible == 0) {
          std::fill(s, s + nk, 0.0f);
          continue;
        }
        const float sum = exp_shifted(s, visible, mx);
        std::fill(s + visible, s + nk, 0.0f);
        const float corr = std::exp(a.m[row] - mx);
        a.l[row] = a.l[row] * corr + sum;
        a.m[row] = mx;
        float* o = a.o + row * hd;
        for (int d = 0; d < hd; ++d) o[d] *= corr;
      }
    }
    if (R <= kFewRows)
      values_few_rows(int(R), nk, hd, S, vblock, a.kv_ld, a.o);
    else
      gemm_nn(int(R), hd, nk, 1.0f, S, kAttnKeyBlock, 1, vblock, a.kv_ld, 1.0f, a.o, hd);
  }
}

// An instruction set's table: its 4-bit matmul, the rest of this file built
// with its flags.
constexpr Kernels table(Isa isa, const char* name, decltype(Kernels::gemm_q4) gemm_q4,
                        int64_t alone_tokens = std::numeric_limits<int64_t>::max()) {
  return {.isa = isa,
          .name = name,
          .quantize = quantize,
          .gemm_q4 = gemm_q4,
          .alone_tokens = alone_tokens,
          .gemm_f32 = gemm_f32,
          .silu_mul = silu_mul,
          .delta_recurrent = delta_recurrent,
          .delta_chunked = delta_chunked,
          .attention = attention};
}

}  // namespace generic
}  // namespace
