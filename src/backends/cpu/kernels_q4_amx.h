// The 4-bit matmul on AMX tiles (tdpbusd: a 16 x 64 tile of unsigned bytes
// times a 64 x 16 one of signed bytes into 16 x 16 int32 sums, one
// instruction), for calls of many tokens; fewer go to the AVX-512 rows.
// One tile product is exactly one group of 64 inputs for 16 weight rows by 16
// tokens, so every int32 sum is one group's exact integer dot and is scaled
// once: out += (s d) isum + b sum(x), the formula of kernels.h.
//   A (weights): row m of a group's tile is the group's 32 low nibbles, then
//     its 32 high nibbles (inputs 0, 2, .., 62, then 1, 3, .., 63), unpacked
//     once per block of 16 rows and reused by every token block.
//   B (tokens): row u of a group's tile holds, per token, the 4 codes that
//     meet A's bytes 4u..4u+3; in the codes' layout (kernels.h, code_offset)
//     those 4 codes are one 32-bit word, so a token's 16 words are picked by
//     two vpermt2d and a blend and 16 tokens' words transposed into the tile.
// Not a public header: include it only from kernels_avx512.cpp (built with
// -mamx-tile -mamx-int8; kernels.cpp checks the CPU and asks Linux for the
// tile state before this table is chosen).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels_q4_tiles.h"

namespace {
namespace amx {

using namespace tern;
using namespace tern::cpu;

constexpr int kTile = 16;          // weight rows, tokens and 32-bit words a tile
constexpr int kTileBytes = 1024;   // 16 rows of 64 bytes
constexpr int kChunkTokens = 128;  // tokens whose codes are arranged at once
constexpr int64_t kMinTokens = 8;  // fewer: the AVX-512 rows (at 16 the two are within 10%)

// Every thread loads the tile shape once: 8 tiles of 16 rows x 64 bytes.
inline void configure_tiles() {
  thread_local bool configured = false;
  if (configured) return;
  struct alignas(64) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg{};
  cfg.palette = 1;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = kTile;
  _tile_loadconfig(&cfg);
  configured = true;
}

// Word u of B's row for group b of a 4-group block: which of the block's 64
// code words it is (the 4 codes of inputs 2 (4 (u % 8) + 0..3) + u / 8).
struct BlockWords {
  uint8_t at[kBlockGroups][kTile];
  constexpr BlockWords() : at() {
    for (int b = 0; b < kBlockGroups; ++b)
      for (int u = 0; u < kTile; ++u)
        at[b][u] = uint8_t(code_offset(kBlockGroups, b, 2 * 4 * (u % 8) + u / 8) / 4);
  }
};
constexpr BlockWords kBlockWords;

// r[j] <- column j of the 16 x 16 matrix of 32-bit words whose row i is r[i].
inline void transpose16(__m512i (&r)[kTile]) {
  __m512i t[kTile];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + c], 128-bit lane L: column 4L + c of rows 4k..4k+3.
  __m512i u[kTile];
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  // Column 4L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44),
                  v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE),
                  v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                  v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// The B tiles of tokens t0.. (nt <= 16; the rest zero) for every group, and
// per group the tokens' scales d and sums s (zero past nt).
inline void arrange_tokens(const QRows& x, int64_t t0, int nt, int64_t G, uint8_t* b, float* d,
                           float* s) {
  const int8_t* rows[kTile];
  for (int n = 0; n < nt; ++n) {
    const int64_t xr = x.index ? x.index[t0 + n] : t0 + n;
    rows[n] = x.q + xr * x.cols;
    for (int64_t g = 0; g < G; ++g) {
      d[g * kTile + n] = x.d[xr * G + g];
      s[g * kTile + n] = x.s[xr * G + g];
    }
  }
  for (int n = nt; n < kTile; ++n)
    for (int64_t g = 0; g < G; ++g) d[g * kTile + n] = s[g * kTile + n] = 0.0f;
  const int64_t GB = G / kBlockGroups * kBlockGroups;
  for (int64_t g = 0; g < G; ++g) {
    __m512i w[kTile];
    if (g < GB) {
      const int gb = int(g % kBlockGroups);
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)kBlockWords.at[gb]));
      const __mmask16 high = _mm512_cmpge_epu32_mask(idx, _mm512_set1_epi32(32));
      for (int n = 0; n < nt; ++n) {
        const int8_t* blk = rows[n] + (g - gb) * kGroup;
        const __m512i lo = _mm512_permutex2var_epi32(_mm512_loadu_si512(blk), idx,
                                                     _mm512_loadu_si512(blk + 64)),
                      hi = _mm512_permutex2var_epi32(_mm512_loadu_si512(blk + 128), idx,
                                                     _mm512_loadu_si512(blk + 192));
        w[n] = _mm512_mask_blend_epi32(high, lo, hi);
      }
    } else {  // past the last block the codes are in B's order already
      for (int n = 0; n < nt; ++n) w[n] = _mm512_loadu_si512(rows[n] + g * kGroup);
    }
    for (int n = nt; n < kTile; ++n) w[n] = _mm512_setzero_si512();
    transpose16(w);
    for (int u = 0; u < kTile; ++u) _mm512_storeu_si512(b + g * kTileBytes + 64 * u, w[u]);
  }
}

// The A tiles of rows r.. (nr <= 16; the rest zero) for every group.
inline void unpack_rows(const QTensor& w, int64_t r, int nr, int64_t G, uint8_t* a) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const size_t rb = w.row_bytes();
  for (int m = 0; m < kTile; ++m) {
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* dst = a + g * kTileBytes + 64 * m;
      if (m >= nr) {
        _mm512_storeu_si512(dst, _mm512_setzero_si512());
        continue;
      }
      const uint8_t* row = w.data + size_t(r + m) * rb;
      const __m256i v = _mm256_loadu_si256((const __m256i*)(row + 32 * g));
      _mm256_storeu_si256((__m256i*)dst, _mm256_and_si256(v, m4));
      _mm256_storeu_si256((__m256i*)(dst + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    }
  }
}

// Groups g0.. g0 + 3 (those below G) into c[j]: group g0 + j in tile j, A and
// B through tiles 4, 6 and 5, 7 in turn. (GCC's tile intrinsics paste their
// tile numbers into the assembly text, so each must be a literal: hence the
// macro.)
inline void products(const uint8_t* a, const uint8_t* b, int64_t g0, int64_t G, int32_t (*c)[256]) {
  const int64_t n = G - g0;
#define TERN_AMX_PRODUCT(C, TA, TB)               \
  _tile_zero(C);                                  \
  _tile_loadd(TA, a + (g0 + C) * kTileBytes, 64); \
  _tile_loadd(TB, b + (g0 + C) * kTileBytes, 64); \
  _tile_dpbusd(C, TA, TB);                        \
  _tile_stored(C, c[C], 64);
  TERN_AMX_PRODUCT(0, 4, 6)
  if (n > 1) {
    TERN_AMX_PRODUCT(1, 5, 7)
  }
  if (n > 2) {
    TERN_AMX_PRODUCT(2, 4, 6)
  }
  if (n > 3) {
    TERN_AMX_PRODUCT(3, 5, 7)
  }
#undef TERN_AMX_PRODUCT
}

// out[m][n] = row m . token n over all G groups for one 16 x 16 block: the
// next 4 groups' products are issued before the last 4 are scaled (meant to
// overlap; on the VM of bench/results/cpu-amx-0361723.md they did not).
inline void block(const uint8_t* a, const uint8_t* b, const float* d, const float* s,
                  const float* sc, const float* bi, int64_t G, float (&out)[kTile][kTile]) {
  alignas(64) int32_t c[2][kBlockGroups][256];
  __m512 acc[kTile];
  for (int m = 0; m < kTile; ++m) acc[m] = _mm512_setzero_ps();
  products(a, b, 0, G, c[0]);
  for (int64_t g0 = 0, set = 0; g0 < G; g0 += kBlockGroups, set ^= 1) {
    const int n = int(std::min<int64_t>(kBlockGroups, G - g0));
    if (g0 + kBlockGroups < G) products(a, b, g0 + kBlockGroups, G, c[set ^ 1]);
    for (int j = 0; j < n; ++j) {
      const int64_t g = g0 + j;
      const __m512 dg = _mm512_loadu_ps(d + g * kTile), sg = _mm512_loadu_ps(s + g * kTile);
      for (int m = 0; m < kTile; ++m) {
        const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(c[set][j] + kTile * m));
        acc[m] = _mm512_fmadd_ps(isum, _mm512_mul_ps(dg, _mm512_set1_ps(sc[m * G + g])), acc[m]);
        acc[m] = _mm512_fmadd_ps(sg, _mm512_set1_ps(bi[m * G + g]), acc[m]);
      }
    }
  }
  for (int m = 0; m < kTile; ++m) _mm512_storeu_ps(out[m], acc[m]);
}

// K: the AVX-512 rows (kernels_avx512.cpp), for their group parameters and
// for calls of few tokens.
template <class K>
void gemm_q4(const QTensor& w, int64_t r0, int64_t r1, const QRows& x, int64_t T,
             const OutRows& o) {
  if (T < kMinTokens) return tiles::gemm_q4<K>(w, r0, r1, x, T, o);
  configure_tiles();
  const int64_t G = int64_t(w.groups_per_row());
  constexpr int kBlocks = kChunkTokens / kTile;
  thread_local std::vector<uint8_t> a, b;
  thread_local std::vector<float> d, s, sc, bi;
  const size_t tiles = size_t(G) * kTileBytes, params = size_t(G) * kTile;
  if (a.size() < tiles) {
    a.resize(tiles);
    sc.resize(params);
    bi.resize(params);
    b.resize(kBlocks * tiles);
    d.resize(kBlocks * params);
    s.resize(kBlocks * params);
  }
  for (int64_t c0 = 0; c0 < T; c0 += kChunkTokens) {
    const int64_t nc = std::min<int64_t>(kChunkTokens, T - c0);
    const int nb = int((nc + kTile - 1) / kTile);
    for (int j = 0; j < nb; ++j)
      arrange_tokens(x, c0 + j * kTile, int(std::min<int64_t>(kTile, nc - j * kTile)), G,
                     b.data() + j * tiles, d.data() + j * params, s.data() + j * params);
    for (int64_t r = r0; r < r1; r += kTile) {
      const int nr = int(std::min<int64_t>(kTile, r1 - r));
      if (nr < kTile) {  // the rows past nr: zero, not the last block's
        std::fill_n(sc.begin(), params, 0.0f);
        std::fill_n(bi.begin(), params, 0.0f);
      }
      K::params(w, r, nr, G, sc.data(), bi.data());
      unpack_rows(w, r, nr, G, a.data());
      for (int j = 0; j < nb; ++j) {
        alignas(64) float out[kTile][kTile];
        block(a.data(), b.data() + j * tiles, d.data() + j * params, s.data() + j * params,
              sc.data(), bi.data(), G, out);
        const int nt = int(std::min<int64_t>(kTile, nc - j * kTile));
        for (int n = 0; n < nt; ++n)
          for (int m = 0; m < nr; ++m) o.put(c0 + j * kTile + n, r + m, out[m][n]);
      }
    }
  }
}

}  // namespace amx
}  // namespace
