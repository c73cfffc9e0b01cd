// The tiling of the SIMD 4-bit matmuls (kernels_avx2.cpp, kernels_avx512.cpp):
// rows in blocks of 16 whose scales and biases are converted once, each block
// passed over by the tokens a few at a time, so a row's unpacked bytes serve
// several tokens and the block's bytes stay in L1 between token blocks.
// K supplies the instruction set's part:
//   K::kMaxTokens                      tokens a row is dotted with at once
//   K::params(w, r, n, G, sc, bi)      scales, biases of rows r.. r+n ([n][G])
//   K::template row<N>(row, sc, bi, G, tokens, out)   out[t] = row . token t
// Not a public header: include it only from a kernels_<isa>.cpp.
#pragma once

#include <algorithm>

#include "backends/cpu/kernels_generic.h"

namespace {
namespace tiles {

using namespace tern;
using namespace tern::cpu;

constexpr int kMaxTokens = 8;

struct Tokens {
  const int8_t* q[kMaxTokens];
  const float* d[kMaxTokens];
  const float* s[kMaxTokens];
};

// K::row<N> for the N = nt (1 <= nt <= M) the block has.
template <class K, int M>
inline void row_n(int nt, const uint8_t* row, const float* sc, const float* bi, int64_t G,
                  const Tokens& x, float* out) {
  if constexpr (M > 1) {
    if (nt < M) return row_n<K, M - 1>(nt, row, sc, bi, G, x, out);
  }
  K::template row<M>(row, sc, bi, G, x, out);
}

constexpr int kRowBlock = 16;   // rows whose bytes every token block passes over
constexpr int64_t kMaxG = 256;  // groups a row may have here (inputs <= 16384)

template <class K>
void gemm_q4(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
             const OutRows& o) {
  static_assert(K::kMaxTokens <= kMaxTokens);
  const int64_t G = int64_t(w.groups_per_row());
  if (G > kMaxG) return generic::gemm_q4(w, r0, r1, x, T, o);
  alignas(64) float sc[kRowBlock * kMaxG], bi[kRowBlock * kMaxG];
  const size_t rb = w.row_bytes();
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int nr = int(std::min<int64_t>(kRowBlock, r1 - b0));
    K::params(w, b0, nr, G, sc, bi);
    for (int64_t t0 = 0; t0 < T; t0 += K::kMaxTokens) {
      const int nt = int(std::min<int64_t>(K::kMaxTokens, T - t0));
      Tokens tk;
      for (int t = 0; t < nt; ++t) {
        const int64_t xr = x.index ? x.index[t0 + t] : t0 + t;
        tk.q[t] = x.q + xr * x.cols;
        tk.d[t] = x.d + xr * G;
        tk.s[t] = x.s + xr * G;
      }
      for (int i = 0; i < nr; ++i) {
        float out[kMaxTokens];
        row_n<K, K::kMaxTokens>(nt, w.data + size_t(b0 + i) * rb, sc + i * G, bi + i * G, G, tk,
                                out);
        for (int t = 0; t < nt; ++t) o.put(t0 + t, b0 + i, out[t]);
      }
    }
  }
}

}  // namespace tiles
}  // namespace
