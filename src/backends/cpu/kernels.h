// The fast CPU backend's inner kernels, one table per instruction set. Each
// table is built from one translation unit compiled with that set's flags
// (kernels_portable.cpp: no -m flags, the baseline that also serves ARM;
// kernels_avx2.cpp: AVX2 + FMA, kernels_avxvnni.cpp: the same with AVX-VNNI,
// kernels_avx512.cpp: AVX-512 with VNNI, each with intrinsics for the 4-bit
// dot products; the amx table is the avx512 one with AMX-INT8 tile products
// for calls of many tokens); kernels() picks one at run time by what the CPU
// supports. Every table takes matrices in the checkpoint's layout and in
// pack16.h's.
//
// The 4-bit kernels never expand the weights: activations are quantised to
// int8 per group of 64 (scale d = max|x| / 127, codes in the order of the
// packed nibbles), and per group the dot is
//   sum_i (s q_i + b) x_i = s d sum_i q_i xq_i + b sum_i x_i
// with the integer sum exact and the exact fp32 sum of the group's inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "checkpoint/weights.h"

namespace tern::cpu {

constexpr int kGroup = 64;

enum class Isa { portable, avx2, avxvnni, avx512, amx };

// Quantised input rows of a 4-bit matmul. Row t of the operation is row
// index[t] of the arrays (index null: row t). The codes of a row are laid out
// for the SIMD kernels (code_offset): groups in blocks of 4 whose 4-byte units
// of packed weights a 32-bit interleave puts side by side, the rest one group
// at a time.
struct QRows {
  const int8_t* q = nullptr;  // [rows][cols]
  const float* d = nullptr;   // [rows][cols / 64] scales
  const float* s = nullptr;   // [rows][cols / 64] sums of the fp32 inputs
  int64_t cols = 0;
  const int32_t* index = nullptr;
};

constexpr int kBlockGroups = 4;

// Where input i (< 64) of group g of a row of G groups sits among its codes.
// Byte e = i / 2 of a group's 32 packed bytes holds input i in its low (i
// even) or high nibble. Groups [4b, 4b + 4) are one block of 256 codes, the
// packed bytes interleaved into four 32-byte vectors j = 0..3 whose 32-bit lane
// l holds bytes 4k..4k+3 (k = j + 4 (l / 4)) of group 4b + l % 4 (what an
// unpacklo/hi_epi32 then epi64 of the block's four 32-byte groups gives, and
// one vpermt2d of two 64-byte loads gives for j = 0, 1 or 2, 3 side by side).
// The block's codes: per pair of vectors (j = 0, 1, then 2, 3) the low
// nibbles' codes of both, then the high nibbles' (64 bytes each, so one
// 64-byte vector of either meets one 64-byte load of codes). Groups past the
// last whole block: the codes of the 32 even inputs, then the 32 odd ones.
constexpr int64_t code_offset(int64_t G, int64_t g, int i) {
  const int nibble = i & 1, e = i >> 1;
  if (g >= G / kBlockGroups * kBlockGroups) return g * kGroup + nibble * 32 + e;
  const int in_block = int(g % kBlockGroups), k = e / 4, m = e % 4;
  const int j = k % 4, lane = in_block + 4 * (k / 4);
  return (g - in_block) * kGroup + 128 * (j / 2) + 64 * nibble + 32 * (j % 2) + 4 * lane + m;
}

// fp32 input rows: row t at x + ld * (index ? index[t] : t).
struct FRows {
  const float* x = nullptr;
  int64_t ld = 0;
  const int32_t* index = nullptr;
};

// Where a matmul writes: output row t, column r at y[ld * (index ? index[t] :
// t) + r], multiplied by scale[t] when given, added to what is there when
// `accumulate`.
struct OutRows {
  float* y = nullptr;
  int64_t ld = 0;
  const int32_t* index = nullptr;
  const float* scale = nullptr;
  bool accumulate = false;

  // Row t's column r = v times scale[t], or that added to what is there: in
  // one std::fma, not left to the kernels' -ffp-contract=fast, which fused
  // the product and the sum in some callers and not in others. So a token's
  // row is the same in a call of any number of tokens (the MoE's scaled and
  // accumulated down projections in a decode step over several sequences).
  void put(int64_t t, int64_t r, float v) const { put_row(t, r, &v, 1); }
  // put() of columns r .. r + n - 1, the row's place and scale found once.
  void put_row(int64_t t, int64_t r, const float* v, int n) const {
    float* out = y + ld * (index ? index[t] : t) + r;
    const float s = scale ? scale[t] : 1.0f;
    for (int i = 0; i < n; ++i) out[i] = accumulate ? std::fma(v[i], s, out[i]) : v[i] * s;
  }
};

// One value head's delta rule over T tokens (the math of model::delta_rule_*):
// q, k [T][dk] normalised (q scaled), v [T][dv], g log-decays, beta [T],
// S [dk][dv] updated in place, o [T][dv].
struct DeltaArgs {
  const float *q, *k, *v, *g, *beta;
  int64_t T;
  int dk, dv;
  float* S;
  float* o;
};

// Causal attention of `heads` query heads sharing one KV head over keys
// [k0, k1), for `nq` queries at positions pos0.. (query i sees keys <= pos0 +
// i). q(h, i) at q + i * q_ld + h * q_hs; key j at k + j * kv_ld, value j at
// v + j * kv_ld. Writes per (i, h) row i * heads + h: the running max m, the
// sum l of exp(score - m) and o (unnormalised, [hd]); scores are q.k * scale.
struct AttnArgs {
  const float* q;
  int64_t q_ld, q_hs;
  int heads, hd;
  int64_t nq, pos0;
  const float *k, *v;
  int64_t kv_ld, k0, k1;
  float scale;
  float *m, *l, *o;
  float* scratch;  // attn_scratch_floats(heads, nq, hd) floats
};

constexpr int kAttnKeyBlock = 64;  // keys scored at once
// The scores of a key block and the queries packed into rows.
inline size_t attn_scratch_floats(int heads, int64_t nq, int hd) {
  return size_t(heads) * size_t(nq) * size_t(kAttnKeyBlock + hd);
}

struct Kernels {
  Isa isa;
  const char* name;
  // One row of `cols` (a multiple of 64) inputs into codes, scales and sums.
  void (*quantize)(const float* x, int64_t cols, int8_t* q, float* d, float* s);
  // y[t][r] = W[r] . x[t] for r in [r0, r1), t < T; W affine 4-bit, group 64,
  // or 4- or 8-bit in the pack16.h layout, r0 and r1 then multiples of 16.
  void (*gemm_q4)(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
                  const OutRows& o);
  // Calls of gemm_q4 with at most this many tokens compute each token's row
  // as a call of that token alone would (a decode step over several
  // sequences relies on it; the amx table's tiles sum in another order).
  // gemm_f32 always does.
  int64_t alone_tokens;
  // The same from fp32 inputs, for every other weight format.
  void (*gemm_f32)(const QTensor& w, int64_t r0, int64_t r1, const FRows& x, int64_t T,
                   const OutRows& o);
  // out[i] = silu(s[i]) * m[i] (m null: 1; out may be s or m), a vectorised exp.
  void (*silu_mul)(const float* s, const float* m, float* out, int64_t n);
  void (*delta_recurrent)(const DeltaArgs& a);
  void (*delta_chunked)(const DeltaArgs& a);
  void (*attention)(const AttnArgs& a);
};

const Kernels& kernels(Isa isa);
// The instruction sets this CPU runs, the portable baseline first.
std::vector<Isa> supported_isas();
// The widest supported set, or the one TERN_CPU_ISA names (portable, avx2,
// avxvnni, avx512, amx).
Isa default_isa();
const char* isa_name(Isa isa);
// The supported set called `name`; fails naming `what` (the flag or variable
// that gave it) where this CPU and build have none.
Isa supported_isa(std::string_view name, std::string_view what);

// True when gemm_q4 takes the matrix (affine, 4 bits, groups of 64, or packed).
inline bool gemm_q4_takes(const QTensor& w) {
  return w.packed16 || (w.quantized() && w.bits == 4 && w.group == kGroup);
}

}  // namespace tern::cpu
