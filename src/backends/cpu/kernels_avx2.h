// The AVX2 + FMA kernels (kernels_avx2.cpp, and with AVX-VNNI
// kernels_avxvnni.cpp): the 4-bit matmul in intrinsics, over the pack16.h
// records (Avx2Records) and over plain rows (Avx2).
//
// Plain rows: on Zen 4 the integer multiplies (vpmaddubsw, vpmaddwd) and the
// FMAs share two pipes, so the kernel spends as few of those as it can per 64
// multiply-adds: a block of 4 groups' packed bytes is interleaved by 32-bit
// units (unpack epi32, then epi64: 8 shuffles, no multiplies) so that each
// 32-bit lane of a vector holds one group; the nibbles, split by and/shift,
// meet the token's codes (laid out to match, kernels.h) in vpmaddubsw, whose
// 16-bit sums over the block stay below 8 * 2 * 15 * 127 < 2^15; one
// vpmaddwd, one conversion and one FMA with the block's scales s * d (one per
// lane) then finish 4 groups. 2.75 multiply-pipe operations per 64
// multiply-adds instead of 5 for a group at a time. Each row is done for up
// to 4 tokens at once (its unpacked bytes shared).
// Not a public header: include it only from those two files.
#pragma once

#include <immintrin.h>

#include "backends/cpu/kernels_packed16.h"
#include "backends/cpu/kernels_q4_tiles.h"

namespace {
namespace avx2 {

using namespace tern;
using namespace tern::cpu;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 group scales (or biases) from i as floats.
inline __m256 load8(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::bf16: {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case DType::f16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i);
  }
}

struct Avx2 {
  static constexpr int kMaxTokens = 4;

  // Scales and biases of `n` rows from r into sc, bi ([n][G]).
  static void params(const QTensor& w, int64_t r, int n, int64_t G, float* sc, float* bi) {
    for (int i = 0; i < n; ++i) {
      const size_t g0 = size_t(r + i) * size_t(G);
      int64_t g = 0;
      for (; g + 8 <= G; g += 8) {
        _mm256_storeu_ps(sc + i * G + g, load8(w.dtype, w.scales, g0 + size_t(g)));
        _mm256_storeu_ps(bi + i * G + g, load8(w.dtype, w.biases, g0 + size_t(g)));
      }
      for (; g < G; ++g) {
        sc[i * G + g] = load_scalar(w.dtype, w.scales, g0 + size_t(g));
        bi[i * G + g] = load_scalar(w.dtype, w.biases, g0 + size_t(g));
      }
    }
  }

  template <int N>
  static void row(const uint8_t* row, const float* sc, const float* bi, int64_t G,
                  const tiles::Tokens& x, float* out);
};

// out[t] = row . token t for t < N: the row's packed bytes, group scales sc
// and biases bi, G groups.
template <int N>
void Avx2::row(const uint8_t* row, const float* sc, const float* bi, int64_t G,
               const tiles::Tokens& x, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t GB = G / kBlockGroups * kBlockGroups;
  for (int64_t g = 0; g < GB; g += kBlockGroups) {
    const auto* w = reinterpret_cast<const __m256i*>(row + 32 * g);
    const __m256i v0 = _mm256_loadu_si256(w), v1 = _mm256_loadu_si256(w + 1),
                  v2 = _mm256_loadu_si256(w + 2), v3 = _mm256_loadu_si256(w + 3);
    const __m256i a = _mm256_unpacklo_epi32(v0, v1), b = _mm256_unpackhi_epi32(v0, v1),
                  c = _mm256_unpacklo_epi32(v2, v3), d = _mm256_unpackhi_epi32(v2, v3);
    const __m256i o[4] = {_mm256_unpacklo_epi64(a, c), _mm256_unpackhi_epi64(a, c),
                          _mm256_unpacklo_epi64(b, d), _mm256_unpackhi_epi64(b, d)};
    __m256i p[N];
    for (int t = 0; t < N; ++t) p[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i lo = _mm256_and_si256(o[j], m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(o[j], 4), m4);
      for (int t = 0; t < N; ++t) {
        // The low nibbles' codes of vector j, then 64 bytes on the high ones'.
        const auto* xq =
            reinterpret_cast<const __m256i*>(x.q[t] + 64 * g + 128 * (j / 2) + 32 * (j % 2));
        p[t] = _mm256_add_epi16(
            p[t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq)),
                                   _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq + 2))));
        // Keeps p[t] a register here: else GCC reassociates the adds, hoists
        // all 8N vpmaddubsw of the block and spills their results (-30%).
        __asm__("" : "+x"(p[t]));
      }
    }
    const __m256 s4 = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(sc + g));
    for (int t = 0; t < N; ++t) {
      const __m256 d4 = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x.d[t] + g));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p[t], ones)),
                               _mm256_mul_ps(s4, d4), acc[t]);
    }
  }
  for (int64_t g = GB; g < G; ++g) {  // the groups past the last block, one at a time
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * g));
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    for (int t = 0; t < N; ++t) {
      const auto* xq = reinterpret_cast<const __m256i*>(x.q[t] + 64 * g);
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq)),
                                         _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq + 1)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                               _mm256_set1_ps(sc[g] * x.d[t][g]), acc[t]);
    }
  }
  for (int t = 0; t < N; ++t) {
    __m256 b = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= G; g += 8)
      b = _mm256_fmadd_ps(_mm256_loadu_ps(bi + g), _mm256_loadu_ps(x.s[t] + g), b);
    float bias = hsum(b);
    for (; g < G; ++g) bias += bi[g] * x.s[t][g];
    out[t] = hsum(acc[t]) + bias;
  }
}

// The pack16.h records (kernels_packed16.h) as two halves of 8 rows, the
// 32-byte halves of each 64-byte vector. A vector's nibbles, split by
// and/shift, meet broadcast units of a token's codes: 4 bits, the low ones
// unit 2j and the high ones unit 2j + 1; 8 bits (the routers), both unit j,
// the high ones' sums shifted by 4 at the end (whole bytes would overflow
// vpmaddubsw's 16-bit sums). AVX2 multiplies by vpmaddubsw, whose 16-bit
// lanes (two products, at most 2 * 15 * 127) take 8 terms before one vpmaddwd
// widens them; a 4-bit record's low and high products share one such chain
// a half (registers enough for 4 tokens). AVX-VNNI (kVnni) multiplies by
// vpdpbusd into 32-bit lanes, low and high in chains of their own: one chain
// of 16 dependent vpdpbusd a half left decode waiting on their latency. Then
// per half one conversion and two FMAs with the rows' scales and biases.
template <bool kVnni>
struct Avx2Records {
  static constexpr int kMaxTokens = kVnni ? 2 : 4;
  struct Acc {
    __m256 half[2];
  };

  template <int B, int N, int S>
  static void record(const uint8_t* rec, const int8_t* const* xa, const float* d, const float* s,
                     Acc* acc) {
    constexpr int64_t kCodes = pack_code_bytes(B);
    constexpr int kVectors = int(kCodes / 64);
    // Vectors between widenings: 8 vpmaddubsw terms a 16-bit lane.
    constexpr int kRun = kVnni ? kVectors : B == 4 ? 4 : 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    auto unit = [&](int t, int u) { return _mm256_set1_epi32(packed16::unit(xa[t] + S * u)); };
    // 32-bit sums of the low nibbles' products (AVX2 4 bits: all) and the high ones'.
    __m256i lo[N][2], hi[N][2];
    for (int t = 0; t < N; ++t)
      for (int h = 0; h < 2; ++h) lo[t][h] = hi[t][h] = _mm256_setzero_si256();
    for (int j0 = 0; j0 < kVectors; j0 += kRun) {
      __m256i pl[N][2], ph[N][2];  // 16-bit sums (AVX2) of lo and hi
      for (int t = 0; t < N; ++t)
        for (int h = 0; h < 2; ++h) pl[t][h] = ph[t][h] = _mm256_setzero_si256();
      for (int j = j0; j < j0 + kRun; ++j) {
        __m256i wl[2], wh[2];
        for (int h = 0; h < 2; ++h) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 * j + 32 * h));
          wl[h] = _mm256_and_si256(v, m4);
          wh[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        for (int t = 0; t < N; ++t) {
          const __m256i ul = unit(t, B == 4 ? 2 * j : j), uh = B == 4 ? unit(t, 2 * j + 1) : ul;
          for (int h = 0; h < 2; ++h) {
            if constexpr (kVnni) {
              lo[t][h] = _mm256_dpbusd_avx_epi32(lo[t][h], wl[h], ul);
              hi[t][h] = _mm256_dpbusd_avx_epi32(hi[t][h], wh[h], uh);
            } else {
              pl[t][h] = _mm256_add_epi16(pl[t][h], _mm256_maddubs_epi16(wl[h], ul));
              __m256i& a = B == 4 ? pl[t][h] : ph[t][h];
              a = _mm256_add_epi16(a, _mm256_maddubs_epi16(wh[h], uh));
              // Keeps the sums in registers (as in Avx2::row: else GCC
              // hoists the run's vpmaddubsw and spills their results).
              __asm__("" : "+x"(pl[t][h]), "+x"(ph[t][h]));
            }
          }
        }
      }
      if constexpr (!kVnni)
        for (int t = 0; t < N; ++t)
          for (int h = 0; h < 2; ++h) {
            lo[t][h] = _mm256_add_epi32(lo[t][h], _mm256_madd_epi16(pl[t][h], ones));
            if constexpr (B == 8)
              hi[t][h] = _mm256_add_epi32(hi[t][h], _mm256_madd_epi16(ph[t][h], ones));
          }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 sc = load8(DType::bf16, rec + kCodes, size_t(8 * h)),
                   bi = load8(DType::bf16, rec + kCodes + 32, size_t(8 * h));
      for (int t = 0; t < N; ++t) {
        const __m256i total =
            _mm256_add_epi32(lo[t][h], B == 8 ? _mm256_slli_epi32(hi[t][h], 4) : hi[t][h]);
        __m256& a = acc[t].half[h];
        a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(sc, _mm256_set1_ps(d[t])), a);
        a = _mm256_fmadd_ps(bi, _mm256_set1_ps(s[t]), a);
      }
    }
  }

  static void spill(const Acc& a, float* out) {
    _mm256_storeu_ps(out, a.half[0]);
    _mm256_storeu_ps(out + 8, a.half[1]);
  }
};

// The table: packed matrices to Avx2Records, plain ones to Avx2.
template <bool kVnni>
constexpr Kernels table(Isa isa, const char* name) {
  return generic::table(isa, name, packed16::gemm_q4_any<Avx2Records<kVnni>, tiles::gemm_q4<Avx2>>);
}

}  // namespace avx2
}  // namespace
