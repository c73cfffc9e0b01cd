// The AVX-512 matmul over matrices in the pack16.h layout. 4 bits: each
// 64-byte vector of a record is 16 rows x 8 codes; its low and high nibbles
// meet a broadcast 4-byte unit of a token's activation codes in one vpdpbusd
// each, so a group of 16 rows is 8 loads, 24 bit operations and 16 vpdpbusd a
// token, then one conversion and two FMAs with the rows' scales and biases;
// the outputs of 16 rows are one vector (no horizontal sums). The weights come
// in as one sequential stream (bench/cpu_kernels on the Zen 5 VM: 32-41.5 GB/s
// from memory on 2 cores where the plain layout's row kernel made 23-24.6).
// 8 bits (the routers): 16 loads, each vector one unit, no nibble split. Up to
// 8 tokens share each record's loads.
// Not a public header: include it only from kernels_avx512.cpp.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels_q4_tiles.h"
#include "backends/cpu/pack16.h"

namespace {
namespace packed16 {

using namespace tern;
using namespace tern::cpu;

inline __m512i unit(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 16 bf16 values as floats.
inline __m512 bf16x16(const uint8_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

// acc[t] += the 16 rows of one record of B-bit codes . token t's group (units
// S bytes apart from xa[t]), scaled by d[t] and with the biases times the
// inputs' sum s[t].
template <int B, int N, int S>
inline void record(const uint8_t* rec, const int8_t* const* xa, const float* d, const float* s,
                   __m512* acc) {
  constexpr int64_t kCodes = pack_code_bytes(B);
  __m512i lo[N], hi[N];
  for (int t = 0; t < N; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
  for (int j = 0; j < kCodes / 64; ++j) {
    const __m512i v = _mm512_loadu_si512(rec + 64 * j);
    if constexpr (B == 8) {  // vector j is unit j
      for (int t = 0; t < N; ++t) {
        __m512i& a = j % 2 ? hi[t] : lo[t];
        a = _mm512_dpbusd_epi32(a, v, unit(xa[t] + S * j));
      }
    } else {  // its low nibbles are unit 2j, its high ones unit 2j + 1
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i l = _mm512_and_si512(v, m4), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      for (int t = 0; t < N; ++t) {
        lo[t] = _mm512_dpbusd_epi32(lo[t], l, unit(xa[t] + S * 2 * j));
        hi[t] = _mm512_dpbusd_epi32(hi[t], h, unit(xa[t] + S * (2 * j + 1)));
      }
    }
  }
  const __m512 sc = bf16x16(rec + kCodes), bi = bf16x16(rec + kCodes + 32);
  for (int t = 0; t < N; ++t) {
    const __m512 p = _mm512_cvtepi32_ps(_mm512_add_epi32(lo[t], hi[t]));
    acc[t] = _mm512_fmadd_ps(p, _mm512_mul_ps(sc, _mm512_set1_ps(d[t])), acc[t]);
    acc[t] = _mm512_fmadd_ps(bi, _mm512_set1_ps(s[t]), acc[t]);
  }
}

// Rows [r, r + 16) (records from rec) for N tokens, output rows t0.. t0 + N.
template <int B, int N>
void block(const uint8_t* rec, int64_t G, const tiles::Tokens& x, const OutRows& o, int64_t t0,
           int64_t r) {
  constexpr int64_t kRecord = pack_record_bytes(B);
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g, rec += kRecord) {
    const int8_t* xa[N];
    float d[N], s[N];
    for (int t = 0; t < N; ++t) {
      xa[t] = x.q[t] + unit_base(G, g);
      d[t] = x.d[t][g];
      s[t] = x.s[t][g];
    }
    if (unit_stride(G, g) == 16)
      record<B, N, 16>(rec, xa, d, s, acc);
    else
      record<B, N, 4>(rec, xa, d, s, acc);
  }
  for (int t = 0; t < N; ++t) {
    float* y = o.y + o.ld * (o.index ? o.index[t0 + t] : t0 + t) + r;
    __m512 v = acc[t];
    if (o.scale) v = _mm512_mul_ps(v, _mm512_set1_ps(o.scale[t0 + t]));
    if (o.accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(y));
    _mm512_storeu_ps(y, v);
  }
}

template <int B, int M>
inline void block_n(int nt, const uint8_t* rec, int64_t G, const tiles::Tokens& x, const OutRows& o,
                    int64_t t0, int64_t r) {
  if constexpr (M > 1) {
    if (nt < M) return block_n<B, M - 1>(nt, rec, G, x, o, t0, r);
  }
  block<B, M>(rec, G, x, o, t0, r);
}

// gemm_q4 for a packed matrix of B-bit codes; r0 and r1 are multiples of 16
// (work items are).
template <int B>
void gemm_bits(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
               const OutRows& o) {
  TERN_CHECK(w.packed16 && w.bits == B && r0 % kPackRows == 0 && r1 % kPackRows == 0);
  const int64_t G = int64_t(w.groups_per_row());
  constexpr int kTokens = tiles::kMaxTokens;
  for (int64_t r = r0; r < r1; r += kPackRows) {
    const uint8_t* rec = w.data + r / kPackRows * G * pack_record_bytes(B);
    for (int64_t t0 = 0; t0 < T; t0 += kTokens) {
      const int nt = int(std::min<int64_t>(kTokens, T - t0));
      tiles::Tokens tk;
      for (int t = 0; t < nt; ++t) {
        const int64_t xr = x.index ? x.index[t0 + t] : t0 + t;
        tk.q[t] = x.q + xr * x.cols;
        tk.d[t] = x.d + xr * G;
        tk.s[t] = x.s + xr * G;
      }
      block_n<B, kTokens>(nt, rec, G, tk, o, t0, r);
    }
  }
}

void gemm_q4(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
             const OutRows& o) {
  if (w.bits == 8) return gemm_bits<8>(w, r0, r1, x, T, o);
  gemm_bits<4>(w, r0, r1, x, T, o);
}

}  // namespace packed16
}  // namespace
