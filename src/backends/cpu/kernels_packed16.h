// The matmul over matrices in the pack16.h layout, for every kernel table:
// per block of 16 rows, its records (one per group) in one sequential
// stream, each record's loads and nibble split shared by up to K::kMaxTokens
// tokens, the 16 rows' sums of a token in one accumulator (no horizontal
// sums). Streaming the weights in order is what lets decode run at the
// memory's pace (bench/cpu_kernels on the Zen 5 VM: 32-41.5 GB/s on 2 cores
// where the plain layout's row kernel made 23-24.6).
// K supplies the instruction set's part:
//   K::kMaxTokens                         tokens one pass over a record serves
//   K::Acc                                one token's 16 fp32 row sums
//   K::template record<B, N, S>(rec, xa, d, s, acc)
//       acc[t] += the 16 rows of one record of B-bit codes . token t's group
//       (its 16 units of 4 codes S bytes apart from xa[t]), scaled by d[t],
//       plus the rows' biases times the inputs' sum s[t]
//   K::spill(acc, out)                    the 16 sums into out[16]
// Not a public header: include it only from a kernels_<isa>.cpp.
#pragma once

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/pack16.h"
#include "core/error.h"

namespace {
namespace packed16 {

using namespace tern;
using namespace tern::cpu;

// One 4-byte unit of activation codes.
inline int32_t unit(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One token's quantised row: its codes, and per group the scale and the sum
// of the inputs.
struct Token {
  const int8_t* q;
  const float *d, *s;
};

// A pass of several tokens computes long enough per record that the
// hardware prefetcher alone leaves the memory idle between its requests:
// asking for the bytes 4 KB ahead (7 records) takes 4 rows of decode from
// 5.0-5.4 to 3.4-3.8 ms a 151 MB matrix on the Zen 5 VM (bench/cpu_kernels
// decode-memory). One token gains nothing from it (docs/cpu-backend.md).
constexpr int64_t kPrefetchAhead = 4096;
constexpr int kPrefetchFrom = 2;  // tokens a pass

// Rows [r, r + 16) (records from rec) for N tokens, output rows t0.. t0 + N.
template <class K, int B, int N>
void block(const uint8_t* rec, int64_t G, const Token* x, const OutRows& o, int64_t t0, int64_t r) {
  constexpr int64_t kRecord = pack_record_bytes(B);
  typename K::Acc acc[N] = {};
  for (int64_t g = 0; g < G; ++g, rec += kRecord) {
    if constexpr (N >= kPrefetchFrom) {
      const char* ahead = reinterpret_cast<const char*>(rec) + kPrefetchAhead;
      for (int64_t b = 0; b < kRecord; b += 64) __builtin_prefetch(ahead + b, 0, 3);
    }
    const int8_t* xa[N];
    float d[N], s[N];
    for (int t = 0; t < N; ++t) {
      xa[t] = x[t].q + unit_base(G, g);
      d[t] = x[t].d[g];
      s[t] = x[t].s[g];
    }
    if (unit_stride(G, g) == 16)
      K::template record<B, N, 16>(rec, xa, d, s, acc);
    else
      K::template record<B, N, 4>(rec, xa, d, s, acc);
  }
  for (int t = 0; t < N; ++t) {
    float v[kPackRows];
    K::spill(acc[t], v);
    o.put_row(t0 + t, r, v, kPackRows);
  }
}

// block<K, B, nt> for the nt (1 <= nt <= M) tokens a pass has.
template <class K, int B, int M>
inline void block_n(int nt, const uint8_t* rec, int64_t G, const Token* x, const OutRows& o,
                    int64_t t0, int64_t r) {
  if constexpr (M > 1) {
    if (nt < M) return block_n<K, B, M - 1>(nt, rec, G, x, o, t0, r);
  }
  block<K, B, M>(rec, G, x, o, t0, r);
}

// gemm_q4 for a packed matrix of B-bit codes; r0 and r1 are multiples of 16
// (work items are).
template <class K, int B>
void gemm_bits(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
               const OutRows& o) {
  TERN_CHECK(w.packed16 && w.bits == B && r0 % kPackRows == 0 && r1 % kPackRows == 0);
  const int64_t G = int64_t(w.groups_per_row());
  for (int64_t r = r0; r < r1; r += kPackRows) {
    const uint8_t* rec = w.data + r / kPackRows * G * pack_record_bytes(B);
    for (int64_t t0 = 0; t0 < T; t0 += K::kMaxTokens) {
      const int nt = int(std::min<int64_t>(K::kMaxTokens, T - t0));
      Token tk[K::kMaxTokens];
      for (int t = 0; t < nt; ++t) {
        const int64_t xr = x.index ? x.index[t0 + t] : t0 + t;
        tk[t] = {x.q + xr * x.cols, x.d + xr * G, x.s + xr * G};
      }
      block_n<K, B, K::kMaxTokens>(nt, rec, G, tk, o, t0, r);
    }
  }
}

// A table's gemm_q4: matrices in the pack16.h layout to the records kernel
// over K, the others to Plain.
template <class K, decltype(Kernels::gemm_q4) Plain>
void gemm_q4_any(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
                 const OutRows& o) {
  if (!w.packed16) return Plain(w, r0, r1, x, T, o);
  if (w.bits == 8) return gemm_bits<K, 8>(w, r0, r1, x, T, o);
  gemm_bits<K, 4>(w, r0, r1, x, T, o);
}

}  // namespace packed16
}  // namespace
