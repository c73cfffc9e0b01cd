// The AVX-512 kernel table (F, BW, VL, VNNI): kernels_generic.h built with
// those flags, and the 4-bit matmul on vpdpbusd, which multiplies unsigned
// bytes (the nibbles) by signed ones (the token's codes) and adds each four
// products into a 32-bit lane in one instruction, where AVX2 needs vpmaddubsw,
// an add and vpmaddwd. A block of 4 groups is two 64-byte loads; one vpermt2d
// each puts the 4-byte units of vectors j = 0, 1 (and 2, 3) of the layout in
// kernels.h side by side, so every 32-bit lane holds one group (lane p: group
// p % 4); the nibbles, split by and/shift, meet 64-byte loads of the codes in
// four vpdpbusd, whose 32-bit sums are exact; one conversion and one FMA with
// the groups' scales s * d finish the block. Each row is done for up to 8
// tokens at once (its unpacked bytes shared; 32 vector registers hold them).
// This translation unit also builds the AMX table, which is this one with
// tile products for calls of many tokens.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a variable
// initialised with itself, which -Wmaybe-uninitialized reports where inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backends/cpu/kernels_packed16.h"
#include "backends/cpu/kernels_q4_amx.h"
#include "backends/cpu/kernels_q4_tiles.h"

namespace tern::cpu {

namespace {

// 16 group scales (or biases) from i as floats, the first n of them (n <= 16).
inline __m512 load16(DType t, const uint8_t* p, size_t i, int n) {
  const __mmask16 m = __mmask16((1u << n) - 1);
  switch (t) {
    case DType::bf16:
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * i)), 16));
    case DType::f16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
    default:
      return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + i);
  }
}

struct Avx512 {
  static constexpr int kMaxTokens = 8;

  static void params(const QTensor& w, int64_t r, int n, int64_t G, float* sc, float* bi) {
    for (int i = 0; i < n; ++i) {
      const size_t g0 = size_t(r + i) * size_t(G);
      for (int64_t g = 0; g < G; g += 16) {
        const int k = int(std::min<int64_t>(16, G - g));
        const __mmask16 m = __mmask16((1u << k) - 1);
        _mm512_mask_storeu_ps(sc + i * G + g, m, load16(w.dtype, w.scales, g0 + size_t(g), k));
        _mm512_mask_storeu_ps(bi + i * G + g, m, load16(w.dtype, w.biases, g0 + size_t(g), k));
      }
    }
  }

  template <int N>
  static void row(const uint8_t* row, const float* sc, const float* bi, int64_t G,
                  const tiles::Tokens& x, float* out);
};

inline __m512i load64(const void* p) {
  return _mm512_loadu_si512(p);
}

// out[t] = row . token t for t < N: the row's packed bytes, group scales sc
// and biases bi, G groups.
template <int N>
void Avx512::row(const uint8_t* row, const float* sc, const float* bi, int64_t G,
                 const tiles::Tokens& x, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  // Lane p of vector j (j = p / 8, l = p % 8): group l % 4's 4-byte unit
  // j + 4 (l / 4), at 32-bit index 8 (l % 4) + unit of the two loads.
  const __m512i i01 = _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 1, 9, 17, 25, 5, 13, 21, 29);
  const __m512i i23 = _mm512_add_epi32(i01, _mm512_set1_epi32(2));
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t GB = G / kBlockGroups * kBlockGroups;
  for (int64_t g = 0; g < GB; g += kBlockGroups) {
    const __m512i z0 = load64(row + 32 * g), z1 = load64(row + 32 * g + 64);
    const __m512i w01 = _mm512_permutex2var_epi32(z0, i01, z1),
                  w23 = _mm512_permutex2var_epi32(z0, i23, z1);
    const __m512i l01 = _mm512_and_si512(w01, m4),
                  h01 = _mm512_and_si512(_mm512_srli_epi16(w01, 4), m4),
                  l23 = _mm512_and_si512(w23, m4),
                  h23 = _mm512_and_si512(_mm512_srli_epi16(w23, 4), m4);
    const __m512 s4 = _mm512_broadcast_f32x4(_mm_loadu_ps(sc + g));
    for (int t = 0; t < N; ++t) {
      const int8_t* xq = x.q[t] + 64 * g;
      __m512i p = _mm512_dpbusd_epi32(zero, l01, load64(xq));
      p = _mm512_dpbusd_epi32(p, h01, load64(xq + 64));
      p = _mm512_dpbusd_epi32(p, l23, load64(xq + 128));
      p = _mm512_dpbusd_epi32(p, h23, load64(xq + 192));
      const __m512 d4 = _mm512_broadcast_f32x4(_mm_loadu_ps(x.d[t] + g));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(s4, d4), acc[t]);
    }
  }
  // The groups past the last block, one at a time in the low 256 bits.
  constexpr __mmask64 kHalf = 0xFFFFFFFFull;
  for (int64_t g = GB; g < G; ++g) {
    const __m512i v = _mm512_maskz_loadu_epi8(kHalf, row + 32 * g);
    const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    for (int t = 0; t < N; ++t) {
      const int8_t* xq = x.q[t] + 64 * g;
      __m512i p = _mm512_dpbusd_epi32(zero, lo, _mm512_maskz_loadu_epi8(kHalf, xq));
      p = _mm512_dpbusd_epi32(p, hi, _mm512_maskz_loadu_epi8(kHalf, xq + 32));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(sc[g] * x.d[t][g]), acc[t]);
    }
  }
  for (int t = 0; t < N; ++t) {
    __m512 b = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g += 16) {
      const __mmask16 m = __mmask16((1u << std::min<int64_t>(16, G - g)) - 1);
      b = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, bi + g), _mm512_maskz_loadu_ps(m, x.s[t] + g),
                          b);
    }
    out[t] = _mm512_reduce_add_ps(acc[t]) + _mm512_reduce_add_ps(b);
  }
}

// The pack16.h records (kernels_packed16.h): 4 bits, each 64-byte vector is
// 16 rows x 8 codes; its low and high nibbles meet a broadcast 4-byte unit of
// a token's codes in one vpdpbusd each, so a record is 8 loads, 24 bit
// operations and 16 vpdpbusd a token, then one conversion and two FMAs with
// the rows' scales and biases. 8 bits (the routers): 16 loads, each vector one
// unit, no nibble split. Up to 8 tokens share a record's loads.
struct Avx512Records {
  static constexpr int kMaxTokens = 8;
  using Acc = __m512;

  template <int B, int N, int S>
  static void record(const uint8_t* rec, const int8_t* const* xa, const float* d, const float* s,
                     Acc* acc) {
    constexpr int64_t kCodes = pack_code_bytes(B);
    auto unit = [&](int t, int u) { return _mm512_set1_epi32(packed16::unit(xa[t] + S * u)); };
    __m512i lo[N], hi[N];
    for (int t = 0; t < N; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
    for (int j = 0; j < kCodes / 64; ++j) {
      const __m512i v = _mm512_loadu_si512(rec + 64 * j);
      if constexpr (B == 8) {  // vector j is unit j
        for (int t = 0; t < N; ++t) {
          __m512i& a = j % 2 ? hi[t] : lo[t];
          a = _mm512_dpbusd_epi32(a, v, unit(t, j));
        }
      } else {  // its low nibbles are unit 2j, its high ones unit 2j + 1
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i l = _mm512_and_si512(v, m4),
                      h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int t = 0; t < N; ++t) {
          lo[t] = _mm512_dpbusd_epi32(lo[t], l, unit(t, 2 * j));
          hi[t] = _mm512_dpbusd_epi32(hi[t], h, unit(t, 2 * j + 1));
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

  static void spill(const Acc& a, float* out) { _mm512_storeu_ps(out, a); }

 private:
  // 16 bf16 values as floats.
  static __m512 bf16x16(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
};

}  // namespace

extern const Kernels kAvx512Kernels = generic::table(
    Isa::avx512, "avx512", packed16::gemm_q4_any<Avx512Records, tiles::gemm_q4<Avx512>>);
// The same with AMX-INT8 tiles for plain matrices in calls of many tokens
// (kernels_q4_amx.h); packed ones take the AVX-512 kernel.
extern const Kernels kAmxKernels =
    generic::table(Isa::amx, "amx", packed16::gemm_q4_any<Avx512Records, amx::gemm_q4<Avx512>>,
                   amx::kMinTokens - 1);

}  // namespace tern::cpu
