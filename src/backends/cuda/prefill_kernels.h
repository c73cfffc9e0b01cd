// Launchers of the CUDA prompt-processing (prefill) kernels: a chunk of T
// tokens through one layer at a time, every weight read once per chunk. Plain
// pointers and one params struct per kernel, as kernels.h; every kernel has a
// CPU twin and a test in tests/cuda/test_cuda_prefill*.cpp.
//
// Activations between the kernels: the residual stream h is fp32 [T][D]; the
// input of every 4-bit GEMM is "staged": fp16 [rows][K] with the columns of
// each 128 in the k order of the GEMM's wgmma steps (staged_col), each row
// multiplied by a power of two that puts its largest |value| in [2^14, 2^15)
// (fp16 keeps 11 significant bits over the row's whole range; the GEMM's
// epilogue multiplies the row's sums back by `xscale`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace tern::cuda {

// Where column c of a staged row of K columns is stored. Lane quad t of the
// GEMM's warps holds the weights of columns 32 t + 8 i + j of a round of 128
// (word i, code j) and dequantises them in pairs (j, j + 4) into A fragments:
// k step 2 i + h takes codes 2 h (k 2 t, 2 t + 1: codes j, j + 4) and 2 h + 1
// (k 2 t + 8, 2 t + 9). A round is stored in that k order, so that wgmma reads
// B as a plain K-major matrix; a last round of 64 columns (t < 2) is stored
// packed, half of each 16-byte chunk, and the GEMM fills the other half with 0.
__host__ __device__ constexpr int staged_col(int c, int K) {
  const int r = c / 128, t = c % 128 / 32, i = c % 32 / 8, j = c % 8;
  const int n = 128 * (r + 1) <= K ? 4 : 2;  // lane quads the round has
  const int h = (j >> 1) & 1, b = j & 1, e = j >> 2;
  return 128 * r + 8 * n * i + 4 * n * h + 2 * n * b + 2 * t + e;
}

// --- Staging (prefill_act.cu) ---------------------------------------------
// What stage_rows does to row t of x ([T][K] fp32, K a multiple of 64 and at
// most 4096) before staging it:
//   norm:  RMSNorm over the row, times norm[k];
//   gated: RMSNorm over each 128 columns (a GDN value head), times norm[k %
//          128] and silu(gate[t * gate_ld + k]) (the GDN gated norm);
//   gate:  times sigmoid(gate[t * gate_ld + (k / hd) * 2 hd + hd + k % hd])
//          (the attention output gate, hd = 256, q|gate interleaved by head);
//   plain: as it is.
enum class StageMode { plain, norm, gated, gate };
struct StageArgs {
  const float* x = nullptr;
  int T = 0, K = 0;
  StageMode mode = StageMode::plain;
  const float* norm = nullptr;
  float eps = 1e-6f;
  const float* gate = nullptr;
  int gate_ld = 0;
  uint16_t* out = nullptr;  // [T][K] staged fp16
  float* xscale = nullptr;  // [T]: the factor the GEMM multiplies each row's sums by
  float* out32 = nullptr;   // optional [T][K]: the prepared row in fp32 (the router's input)
};
cudaError_t stage_rows(const StageArgs& a, cudaStream_t st);

// h[t] = embedding row of tokens[t] (dequantised exactly as the CPU), t < T.
cudaError_t embed_rows(const DMat& E, const int* tokens, int T, float* h, cudaStream_t st);

// --- The 4-bit GEMM (prefill_gemm.cu) ---------------------------------------
// y = x . W^T on tensor cores (wgmma m64nBNk16, fp16 operands, fp32 sums): the
// weights dequantised to fp16 in registers from either layout (tile or MLX,
// kernels.h), `bm` weight rows by `bn` staged rows a block. The weight rows are
// split into groups of `group_rows` (the experts of a stack; the whole matrix
// for a dense GEMM); a block's rows come from a tile map (grouped) or are
// rows n * BN.. of the only group (dense).
enum class GemmOut {
  store,    // y[slot * ldy + m] = v
  add,      // y[slot * ldy + m] += v
  swiglu,   // gate/up pairs (kernels.h's to_tiles pairs): act[slot][staged f] = fp16(silu(g) u)
  weighted  // y16[slot * ldy + m] = fp16(v * row_w[slot])
};
// One N-tile of a grouped GEMM: rows [row0, row0 + rows) of the sorted
// activations, all of group `group`.
struct GemmTile {
  int group, row0, rows, pad;
};
struct GemmArgs {
  DMat W;              // 4-bit: tiles, or w + sb (MLX layout)
  int group_rows = 0;  // weight rows a group (an expert); W.rows for a dense GEMM
  int pair = 0;        // MLX-layout gate/up stacks: the expert width (rows per group 2 pair)
  const uint16_t* x = nullptr;    // staged activations [*][W.cols]
  const int* xrow = nullptr;      // slot -> row of x (a gather), or null: slot itself
  const float* xscale = nullptr;  // per row of x, or null: 1
  // Dense: n slots, tiles of BN. Grouped: map[0 .. *map_count) (max_tiles launched).
  int n = 0;
  const GemmTile* map = nullptr;
  const int* map_count = nullptr;
  int max_tiles = 0;
  GemmOut out = GemmOut::store;
  float* y = nullptr;
  int ldy = 0;
  uint16_t* act = nullptr;  // swiglu: [slots][group_rows / 2] staged fp16 (no row scale)
  // weighted: [slots][ldy] fp16 (half the bytes of fp32 written by the down
  // projection and read back by moe_combine, nine rows a token).
  uint16_t* y16 = nullptr;
  const float* row_w = nullptr;  // weighted: per slot
  int bn = 128;                  // staged rows a block (gemm_bn_valid)
  int bm = 256;                  // 128 or 256 weight rows a block
  // Dense store/add GEMMs of few blocks split K into parts summed in order
  // here (null: never split): S parts take S n group_rows floats.
  float* work = nullptr;
  size_t work_floats = 0;
};
// A work area that takes the splits of any dense GEMM with tiles up to 64 wide.
size_t gemm_work_floats();
// Slots a tile: 16, 32, 64 or 128; grouped GEMMs (the MoE's tile map) also
// 48 and 96 (with bm 128), widths that hold an expert's rows in one tile at
// 1K and 2K prompts.
constexpr bool grouped_only_bn(int bn) {
  return bn == 48 || bn == 96;
}
constexpr bool gemm_bn_valid(int bn, bool grouped) {
  return bn == 16 || bn == 32 || bn == 64 || bn == 128 || (grouped && grouped_only_bn(bn));
}
cudaError_t prefill_gemm(const GemmArgs& a, cudaStream_t st);
// Whether prefill_gemm takes W (4-bit, columns a multiple of 64; either layout).
bool prefill_gemm_takes(const DMat& W);

// --- MoE routing and combine (moe_prefill.cu) --------------------------------
// Router logits of T rows: logits[t][r] = a32[t] . W[r] (8-bit MLX layout,
// near-fp32 tensor-core sums, moe_prefill.cu), r < W.rows (the experts, then the shared expert's
// gate), in `parts` partial sums over K ranges: logits[p][t][r], summed in
// order by route_tokens (RouteArgs::parts).
cudaError_t router_logits(const DMat& W, const float* a32, int T, int parts, float* logits,
                          cudaStream_t st);
// The parts for T tokens: more than one only for short chunks (their blocks
// would leave SMs idle), and then parts T <= kRouterPartTokens.
constexpr int kRouterPartTokens = 2048, kRouterMaxParts = 8;
int router_parts(int T, int rows, int K);
// Floats router_logits writes for chunks of up to T tokens.
inline size_t router_logit_floats(int T, int rows) {
  return size_t(rows) * size_t(T > kRouterPartTokens ? T : kRouterPartTokens);
}

// The routing of T tokens from their router logits ([T][E + 1]): top_k experts
// (ties to the lower id), weights renormalised over them, sigmoid of the
// shared gate; then the rows of each expert gathered in expert order (the
// shared expert E takes every token, last): A = T (top_k + 1) slots.
struct RouteArgs {
  const float* logits = nullptr;  // [parts][T][E + 1]
  int T = 0, E = 0, top_k = 0, parts = 1;
  int* counts = nullptr;      // [E + 1] scratch, zero before the first call (left zero)
  int* offsets = nullptr;     // [E + 2] scratch: each group's first slot, then A
  int* cursor = nullptr;      // [E + 1] scratch
  int* ids = nullptr;         // [T][top_k] scratch: the chosen experts
  float* wts = nullptr;       // [T][top_k + 1] scratch: their weights, the shared gate last
  int* slot_row = nullptr;    // [A]: the token of each slot
  float* slot_w = nullptr;    // [A]: its routing weight (shared: sigmoid of the gate)
  int* token_slot = nullptr;  // [T][top_k + 1]: each token's slots, in choice order, shared last
  GemmTile* map = nullptr;    // [max_tiles(bn)] N-tiles of the grouped GEMMs
  int* map_count = nullptr;
  int bn = 128;
};
// Tiles a map of T tokens may need at `bn` rows a tile.
int route_max_tiles(int T, int E, int top_k, int bn);
cudaError_t route_tokens(const RouteArgs& a, cudaStream_t st);

// h[t][d] += sum over the token's slots (choice order, shared last) of y16[slot][d]
// (fp16; D a multiple of 8).
cudaError_t moe_combine(const uint16_t* y16, const int* token_slot, int T, int slots, int D,
                        float* h, cudaStream_t st);

// --- Gated DeltaNet (gdn_prefill.cu, gdn_chunked.cu) --------------------------
// The token-parallel part after the in-projection: the causal conv over the
// qkv channels with the carried state (not updated here), SiLU, q and k L2
// norms (q also / sqrt(128)), beta = sigmoid(b) and the log-decay g =
// -exp(A_log) softplus(a + dt_bias).
struct GdnPrepArgs {
  const float* proj = nullptr;  // [T][ld]: qkv (C) | z (Hv 128) | b (Hv) | a (Hv)
  int T = 0, ld = 0;
  const float* conv_w = nullptr;      // [C][kernel]
  const float* conv_state = nullptr;  // [kernel - 1][C], oldest first
  int kernel = 0;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  int k_heads = 0, v_heads = 0;
  float* q = nullptr;     // [T][Hk][128]
  float* k = nullptr;     // [T][Hk][128]
  float* v = nullptr;     // [T][Hv][128]
  float* beta = nullptr;  // [T][Hv]
  float* g = nullptr;     // [T][Hv]
};
cudaError_t gdn_prep(const GdnPrepArgs& a, cudaStream_t st);
// The conv state after the T rows: the last kernel - 1 pre-conv rows of
// [state; proj rows].
cudaError_t gdn_conv_state(const float* proj, int T, int ld, int channels, int kernel,
                           float* conv_state, cudaStream_t st);
// The delta rule over T tokens per value head on S ([Hv][128][128] fp32,
// updated): o [T][Hv][128]. `scan`: token by token, each block keeping a
// slice of the state in registers; else the chunked (WY) form on tensor cores
// (tf32 mma), 64 tokens a chunk.
struct DeltaArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr, *g = nullptr;
  int T = 0, k_heads = 0, v_heads = 0;
  float* S = nullptr;
  float* o = nullptr;
  float* scratch = nullptr;  // chunked: delta_scratch_floats(T, v_heads)
};
cudaError_t gdn_delta_scan(const DeltaArgs& a, cudaStream_t st);
cudaError_t gdn_delta_chunked(const DeltaArgs& a, cudaStream_t st);
size_t delta_scratch_floats(int T, int v_heads);

// --- Attention (attn_prefill.cu) ----------------------------------------------
// The prep of T tokens at positions pos0..: q RMSNorm + partial RoPE into q16
// (bf16 [H][T][256], times log2(e) / 16), k RMSNorm + RoPE and v into the KV
// caches (kernels.h's chunked layout, bf16).
struct AttnPrepArgs {
  const float* qkv = nullptr;  // [T][H 512 | KV 256 | KV 256]
  int T = 0, pos0 = 0;
  const float *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-6f;
  int heads = 0, kv_heads = 0, rotary = 0, capacity = 0;
  const float* inv_freq = nullptr;
  uint16_t* q16 = nullptr;
  uint16_t *k_cache = nullptr, *v_cache = nullptr;
};
cudaError_t attn_prep(const AttnPrepArgs& a, cudaStream_t st);
// Causal GQA flash attention of the T tokens over the cache's keys 0 ..
// pos0 + t: out fp32 [T][H][256] (before the output gate).
struct FlashArgs {
  const uint16_t* q16 = nullptr;
  const uint16_t *k_cache = nullptr, *v_cache = nullptr;
  int T = 0, pos0 = 0, heads = 0, kv_heads = 0, capacity = 0;
  float* out = nullptr;
  // Scratch for splitting the keys of a short chunk over a long cache (null:
  // never split): S ranges take S T heads (256 + 2) floats.
  float* work = nullptr;
  size_t work_floats = 0;
};
cudaError_t attn_flash(const FlashArgs& a, cudaStream_t st);
// The work area under which attn_flash splits as far as it would at any T.
size_t flash_work_floats(int heads, int kv_heads);

}  // namespace tern::cuda
