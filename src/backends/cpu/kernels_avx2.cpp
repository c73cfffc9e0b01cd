// The AVX2 + FMA kernel table: kernels_generic.h built with -mavx2 -mfma
// -mf16c (the compiler vectorises the fp32 kernels 8 wide), and the 4-bit
// matmul in intrinsics. On Zen 4 the integer multiplies (vpmaddubsw,
// vpmaddwd) and the FMAs share two pipes, so the kernel spends as few of
// those as it can per 64 multiply-adds: a block of 4 groups' packed bytes is
// interleaved by 32-bit units (unpack epi32, then epi64: 8 shuffles, no
// multiplies) so that each 32-bit lane of a vector holds one group; the
// nibbles, split by and/shift, meet the token's codes (laid out to match,
// kernels.h) in vpmaddubsw, whose 16-bit sums over the block stay below
// 8 * 2 * 15 * 127 < 2^15; one vpmaddwd, one conversion and one FMA with the
// block's scales s * d (one per lane) then finish 4 groups. 2.75 multiply-pipe
// operations per 64 multiply-adds instead of 5 for a group at a time. Each row
// is done for up to 4 tokens at once (its unpacked bytes shared).
#include <immintrin.h>

#include "backends/cpu/kernels_q4_tiles.h"

namespace tern::cpu {

namespace {

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

}  // namespace

extern const Kernels kAvx2Kernels = generic::table(Isa::avx2, "avx2", tiles::gemm_q4<Avx2>);

}  // namespace tern::cpu
