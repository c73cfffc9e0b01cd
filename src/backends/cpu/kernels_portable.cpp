// The portable kernel table: kernels_generic.h built with the project's
// baseline flags (what every CPU runs; on ARM the compiler's NEON), and the
// pack16.h records' matmul in 16-byte vectors of 4 rows x 4 codes, the shape
// of NEON's dot product: where the compiler targets it (__ARM_FEATURE_DOTPROD,
// e.g. -march=armv8.2-a+dotprod or Apple's cores) each is one sdot with a
// broadcast unit of a token's codes; elsewhere the same sums come from 16-bit
// multiplies and pairwise adds, which SSE2 and plain NEON vectorise.
#include "backends/cpu/kernels_generic.h"
#include "backends/cpu/kernels_packed16.h"

#if defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#endif

namespace {
namespace portable {

using namespace tern;
using namespace tern::cpu;

typedef uint8_t U8x16 __attribute__((vector_size(16)));
typedef int8_t I8x16 __attribute__((vector_size(16)));
typedef int16_t I16x16 __attribute__((vector_size(32)));
typedef int16_t I16x8 __attribute__((vector_size(16)));
typedef int16_t I16x4 __attribute__((vector_size(8)));
typedef int32_t I32x4 __attribute__((vector_size(16)));
typedef float F32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef uint16_t U16x16 __attribute__((vector_size(32)));

// acc[r] += sum_m w[4r + m] * x[m] for the 4 rows of w (bytes below 16: one
// nibble each), x the 4 signed codes of `unit`.
inline I32x4 dot4(I32x4 acc, U8x16 w, int32_t unit) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, vreinterpretq_s8_u8(w), vreinterpretq_s8_s32(vdupq_n_s32(unit)));
#else
  const I32x4 u4 = I32x4{} + unit;
  I8x16 x;
  std::memcpy(&x, &u4, sizeof x);
  // Each product at most 15 * 127, so a row's 4 fit in 16 bits.
  const I16x16 p = __builtin_convertvector(w, I16x16) * __builtin_convertvector(x, I16x16);
  const I16x8 pairs = __builtin_shufflevector(p, p, 0, 2, 4, 6, 8, 10, 12, 14) +
                      __builtin_shufflevector(p, p, 1, 3, 5, 7, 9, 11, 13, 15);
  const I16x4 quads = __builtin_shufflevector(pairs, pairs, 0, 2, 4, 6) +
                      __builtin_shufflevector(pairs, pairs, 1, 3, 5, 7);
  return acc + __builtin_convertvector(quads, I32x4);
#endif
}

// 16 bf16 values as floats.
inline void bf16x16(const uint8_t* p, F32x16& out) {
  U16x16 h;
  std::memcpy(&h, p, sizeof h);
  const U32x16 bits = __builtin_convertvector(h, U32x16) << 16;
  std::memcpy(&out, &bits, sizeof out);
}

// The pack16.h records (kernels_packed16.h), a 64-byte vector as 4 quarters
// of 4 rows. 4 bits: a vector's low nibbles meet unit 2j of a token's codes,
// its high ones unit 2j + 1; 8 bits (the routers): both nibbles of vector j
// meet unit j, the high ones' sums times 16 at the end (sdot takes signed
// bytes, which whole 8-bit codes are not).
struct Records {
  static constexpr int kMaxTokens = 4;
  using Acc = F32x16;

  static void spill(const Acc& a, float* out) { std::memcpy(out, &a, sizeof a); }

  template <int B, int N, int S>
  static void record(const uint8_t* rec, const int8_t* const* xa, const float* d, const float* s,
                     Acc* acc) {
    constexpr int64_t kCodes = pack_code_bytes(B);
    I32x4 sum[N][4] = {}, high[N][4] = {};
    for (int j = 0; j < kCodes / 64; ++j) {
      int32_t ul[N], uh[N];
      for (int t = 0; t < N; ++t) {
        ul[t] = packed16::unit(xa[t] + S * (B == 4 ? 2 * j : j));
        uh[t] = B == 4 ? packed16::unit(xa[t] + S * (2 * j + 1)) : ul[t];
      }
      for (int q = 0; q < 4; ++q) {
        U8x16 v;
        std::memcpy(&v, rec + 64 * j + 16 * q, sizeof v);
        const U8x16 lo = v & 15, hi = v >> 4;
        for (int t = 0; t < N; ++t) {
          sum[t][q] = dot4(sum[t][q], lo, ul[t]);
          I32x4& a = B == 4 ? sum[t][q] : high[t][q];
          a = dot4(a, hi, uh[t]);
        }
      }
    }
    F32x16 sc, bi;
    bf16x16(rec + kCodes, sc);
    bf16x16(rec + kCodes + 32, bi);
    for (int t = 0; t < N; ++t) {
      int32_t total[kPackRows];
      for (int q = 0; q < 4; ++q) {
        const I32x4 v = B == 8 ? sum[t][q] + (high[t][q] << 4) : sum[t][q];
        std::memcpy(total + 4 * q, &v, sizeof v);
      }
      F32x16 p;
      for (int r = 0; r < kPackRows; ++r) p[r] = float(total[r]);
      acc[t] += p * (sc * d[t]) + bi * s[t];
    }
  }
};

}  // namespace portable
}  // namespace

namespace tern::cpu {

extern const Kernels kPortableKernels = generic::table(
    Isa::portable, "portable", packed16::gemm_q4_any<portable::Records, generic::gemm_q4>);

}  // namespace tern::cpu
