// Launchers of the CUDA kernels (host-callable, plain pointers, one params
// struct per kernel). Every kernel has a CPU twin in backends/cpu/ and a test
// in tests/cuda/. Activations are fp32, weights stay affine 4/8-bit (MLX
// layout, group 64), the KV cache is bf16, recurrent and conv state fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/sampling_rules.h"

namespace tern::cuda {

constexpr int kGroup = 64;     // quantisation group (checked at load)
constexpr int kGdnDim = 128;   // GDN key and value head width (checked at load)
constexpr int kHeadDim = 256;  // attention head width (checked at load)
constexpr int kMaxTopK = 8;

// An affine-quantised matrix on the device, MLX layout: `w` rows of cols*bits/32
// words, `sb` [rows][cols/64] scale|bias words. A 4-bit matrix the tensor-core
// GEMVs read is kept in the tile layout instead (`tiles`; w and sb null):
// 16-row tiles of 9 * cols bytes (the last padded with zero rows), each a run
// of 1,152-byte rounds of 128 columns: per lane (g, t) of a warp the 16 bytes
// of codes at chunk 4 round + t of the tile's row g, then the same of row
// g + 8, then the 16 rows' scale|bias words of the round's two groups (row i,
// group j at word 2 i + j). A lane's loads are then contiguous across the warp
// (no shared-memory bank conflicts) and a tile is one bulk copy.
struct DMat {
  const uint32_t* w = nullptr;
  // Per row and group: the bf16 scale in the low half, the bf16 bias in the
  // high half (one load for both).
  const uint32_t* sb = nullptr;
  const uint8_t* tiles = nullptr;
  int rows = 0, cols = 0, bits = 0;
  size_t bytes() const {
    return size_t(rows) * cols * bits / 8 + size_t(rows) * (cols / kGroup) * 4;
  }
};

constexpr int kTileRound = 128;        // columns a round of a tile
constexpr int kTileRoundBytes = 1152;  // 16 rows x 128 codes + 32 words
// Whether m's shape has a tile layout.
inline bool tileable(const DMat& m) {
  return m.bits == 4 && m.cols > 0 && m.cols % kTileRound == 0;
}
// Bytes of m in the tile layout.
inline size_t tiled_bytes(const DMat& m) {
  return size_t(m.rows + 15) / 16 * (m.cols / kTileRound) * kTileRoundBytes;
}
// Writes the tile layout of m (MLX layout, tileable) to out. pair > 0 orders
// the rows of gate/up stacks ([expert][gate rows; up rows], pair rows each):
// tile p of an expert holds gate rows 8p..8p+7 and up rows 8p..8p+7, so a
// tile finishes SwiGLU on its own.
cudaError_t to_tiles(const DMat& m, uint8_t* out, int pair, cudaStream_t st);
// Whether the tensor-core paths take a matrix of this shape in the tile
// layout (the loader tiles exactly these; the others stay in the MLX layout
// for the SIMT kernels): a dense GEMV's, the experts' gate/up stack's (expert
// width `inter`), the experts' down stack's (`hidden` rows an expert).
bool gemv_tiles(const DMat& m);
bool up_tiles(const DMat& gate_up, int inter);
bool down_tiles(const DMat& down, int hidden, int top_k);

// The tiles a later dense GEMV copies after staging (each of its `blocks`
// blocks' run but the first `skip`), which a tile GEMV brings into L2 once its
// own copies are out, so the later copies hit L2 instead of waiting for DRAM.
struct L2Ahead {
  const uint8_t* tiles = nullptr;
  uint32_t tile_bytes = 0;
  int n = 0, blocks = 0, skip = 0;
};

// What the GEMV does with each output row.
enum class GemvOut { store, add, conv };

// The causal conv fused into the GDN in-projection: rows < channels are
// conv-ed with the carried state, SiLU-ed and written to `out`; the state
// ([kernel-1][channels], oldest first) advances by one row. The next
// gate_rows rows (z) are stored SiLU-ed: the gated norm's gate, activated once
// here instead of in every block of the out-projection that stages it.
struct ConvArgs {
  const float* weight = nullptr;  // [channels][kernel]
  float* state = nullptr;
  float* out = nullptr;
  int channels = 0, kernel = 0, gate_rows = 0;
};

// The next router's logits, fed by the GEMV that finishes h (GemvOut::add):
// every block adds its rows' share of router(h * norm), before the RMSNorm
// factor, into one of kFeedCopies copies of the logits (fewer atomics on one
// address) in 2^-32 fixed point, so the sums come out the same in any order.
// route_experts_up reads, adds and re-zeroes them.
constexpr int kFeedCopies = 8;
struct RouterFeed {
  DMat W;                             // the 8-bit router; W.cols = the GEMV's rows
  const float* norm = nullptr;        // the post-attention RMSNorm weight
  unsigned long long* acc = nullptr;  // [kFeedCopies][W.rows], zero before the first feed
};

// The input's RMSNorm: over all of x (norm_group 0), or over every norm_group
// (a power of two, 8..128) columns with the multiplier norm[k % norm_group]
// and then gate[k], already SiLU-ed (the GDN gated norm, its gate as the
// in-projection stored it: ConvArgs::gate_rows; tensor-core path only).
struct GemvArgs {
  DMat W;
  const float* x = nullptr;     // [W.cols]
  const float* norm = nullptr;  // optional RMSNorm multiplier applied to x first
  float eps = 1e-6f;
  float* y = nullptr;  // [W.rows]
  GemvOut out = GemvOut::store;
  ConvArgs conv = {};    // GemvOut::conv only
  RouterFeed feed = {};  // GemvOut::add only, where gemv_feeds(W)
  int norm_group = 0;
  const float* gate = nullptr;  // [W.cols], with norm_group
};
cudaError_t gemv(const GemvArgs& a, cudaStream_t st);
// What brings a later gemv over W's late tiles into L2 (none off the
// tensor-core path).
L2Ahead gemv_ahead(const DMat& W);
// Whether a GEMV over W can feed a router (the tensor-core path with one
// 16-row tile per block).
bool gemv_feeds(const DMat& W);

// Router of one token: RMSNorm(h)*norm, logits of the stacked [router;
// shared_expert_gate] 8-bit matrix, softmax over the experts, top-k,
// renormalised weights (ids, wts; wts[k] = sigmoid(shared gate logit)).
struct RouterArgs {
  DMat W;  // rows = n_experts + 1
  const float* h = nullptr;
  const float* norm = nullptr;
  float eps = 1e-6f;
  float* a = nullptr;           // [hidden] normalised input (scratch)
  float* logits = nullptr;      // [n_experts + 1] scratch
  unsigned* counter = nullptr;  // zero before the first call; reset by the kernels
  int* ids = nullptr;           // [top_k]
  float* wts = nullptr;         // [top_k + 1]
  int top_k = 0;
  unsigned long long* fed = nullptr;  // the logits the GEMV before fed (RouterFeed::acc)
  // The previous layer's feed (another buffer, read by a finished launch),
  // zeroed here for the next layer's producer; the feeds alternate by layer.
  unsigned long long* spent = nullptr;
};

// gate+up+SwiGLU of the top_k routed experts and the shared expert (stacked as
// expert n_experts): act[slot][f] = silu(g) * u, on a = RMSNorm(h)*norm.
struct ExpertsUpArgs {
  DMat gate_up;  // rows (n_experts+1) * 2I: per expert I gate rows then I up rows
  const float* a = nullptr;
  const int* ids = nullptr;
  float* act = nullptr;  // [(top_k+1) * I]
  int n_experts = 0, top_k = 0, inter = 0;
};
// Routes the token (r) and runs the experts' gate/up (u, whose a and ids are
// r's). With fed logits (r.fed, where router_fed allows) this is one launch:
// every block reads the logits, picks the experts and runs its share of the
// tensor-core GEMV; otherwise a router launch (the last block picks) and a
// gate/up launch.
cudaError_t route_experts_up(const RouterArgs& r, const ExpertsUpArgs& u, cudaStream_t st);
// The experts' choice as route_up and the router make it (ids: the top_k of
// the E <= 1024 logits, ties to the lower index), for its test.
cudaError_t pick_top_k(const float* logits, int E, int top_k, int* ids, cudaStream_t st);
// Whether the GEMV over `producer` can feed router r for gate/up u.
bool router_fed(const DMat& producer, const RouterArgs& r, const ExpertsUpArgs& u);

// h[d] += sum_slot wts[slot] * down_e(act[slot])[d] over the routed and shared experts.
struct ExpertsDownArgs {
  DMat down;  // rows (n_experts+1) * hidden, cols I
  const float* act = nullptr;
  const int* ids = nullptr;
  const float* wts = nullptr;
  float* h = nullptr;
  int n_experts = 0, top_k = 0;
  L2Ahead ahead = {};  // tensor-core path
};
cudaError_t experts_down(const ExpertsDownArgs& a, cudaStream_t st);

// One Gated DeltaNet decode step after the conv: q/k L2 norms, gates, the delta
// rule on S ([v_heads][k][v] fp32). conv: [2*Hk*128 + Hv*128] post-conv q|k|v;
// b/a follow the in-projection layout. The gated RMSNorm of the output is the
// out_proj GEMV's (GemvArgs::gate).
struct GdnStepArgs {
  const float* conv = nullptr;
  const float* beta_in = nullptr;  // [Hv] pre-sigmoid
  const float* a_in = nullptr;     // [Hv]
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  float* S = nullptr;
  float* y = nullptr;  // [Hv*128], before the gated RMSNorm (the out_proj GEMV applies it)
  int k_heads = 0, v_heads = 0;
};
cudaError_t gdn_step(const GdnStepArgs& a, cudaStream_t st);

// The KV cache of a layer: K and V each bf16 [kv][capacity][256], capacity a
// multiple of 16, every 16 positions one 8 KB chunk whose 16-byte pieces
// (8 dims) lie in the order the attention's lanes read them, so that a chunk is
// one bulk copy: dims 8q..8q+7 of position o of the chunk are K's piece
// k_piece(o, q) and V's piece v_piece(o, q).
constexpr int kKvChunk = 16;
__host__ __device__ constexpr int k_piece(int o, int q) {
  return ((o / 8) * 8 + q / 4) * 32 + (o % 8) * 4 + q % 4;
}
__host__ __device__ constexpr int v_piece(int o, int q) {
  return (((o & 1) + 2 * (o / 8)) * 4 + q / 8) * 32 + (q % 8) * 4 + (o % 8) / 2;
}

// Decode attention of one token at position *pos: the prep (q and k RMSNorm,
// partial rotate-half RoPE, k and v appended to the caches), split-K GQA
// attention over keys [0, *pos] and the combine, which also applies
// sigmoid(gate): out [H][256].
struct AttnDecodeArgs {
  const float* qkv = nullptr;  // [H * (q 256 | gate 256) | KV*256 k | KV*256 v]
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  const int* pos = nullptr;
  float* part = nullptr;  // [H][splits][256 + 2]
  float* out = nullptr;
  int heads = 0, kv_heads = 0, rotary = 0, capacity = 0, splits = 1;
  const float* inv_freq = nullptr;  // [rotary / 2], model/rope.h's table
};
cudaError_t attn_decode(const AttnDecodeArgs& a, cudaStream_t st);
// The rotation's cos and sin at position pos (what attn_decode's prep uses),
// for its test: cs, sn [rotary / 2].
cudaError_t rotation_table(const float* inv_freq, int rotary, int pos, float* cs, float* sn,
                           cudaStream_t st);
constexpr int kMaxAttnSplits = 128;
// Splits used for a context of n keys (fixed per captured graph tier).
int attn_splits(int64_t n, int kv_heads);

// h = embedding row of *token (4-bit affine, dequantised exactly as the CPU).
cudaError_t embed(const DMat& E, const int* token, float* h, cudaStream_t st);

// Arg-max of logits (lower index wins ties): *token = best, out[*step] = best,
// ++*step, ++*pos. counter/scratch as for the router.
struct ArgmaxArgs {
  const float* logits = nullptr;
  int n = 0;
  float* scratch = nullptr;  // [2 * blocks]
  unsigned* counter = nullptr;
  int* token = nullptr;
  int* out = nullptr;  // ring of out_mask + 1 ids
  int out_mask = 0;
  int* step = nullptr;
  int* pos = nullptr;
};
cudaError_t argmax_advance(const ArgmaxArgs& a, cudaStream_t st);

// logits[i] = -inf where bit i of words is clear (twin: tern::apply_mask).
cudaError_t mask_logits(float* logits, const uint32_t* words, int n, cudaStream_t st);

// The sampler's token choice (twin: sample_token in backend/sampler.h), a few
// launches that replace argmax_advance in the captured step: penalties from
// counts[] (the chosen token's count is incremented), temperature, top-k and
// top-p thresholds by radix select on the keys of z, min-p, and the seeded
// draw for step *step; then the same hand-off as argmax_advance. `rules` and
// `counts` live on the device, so a captured graph serves any parameters.
struct SampleArgs {
  const float* logits = nullptr;
  int n = 0;
  const SampleRules* rules = nullptr;
  int* counts = nullptr;    // [n]
  void* scratch = nullptr;  // sample_scratch_bytes(n), zero before the first call
  int* token = nullptr;
  int* out = nullptr;
  int out_mask = 0;
  int* step = nullptr;
  int* pos = nullptr;
};
size_t sample_scratch_bytes(int n);
cudaError_t sample_advance(const SampleArgs& a, cudaStream_t st);

// The code paths the launchers took, counted at launch (so at capture for the
// step graphs): the tests assert that the real model's widths run the
// tensor-core tiles and the router feed, not only the SIMT fallbacks.
enum class KernelPath : int {
  gemv_tile,        // dense GEMV on tensor cores (plain, norm or gated staging)
  gemv_tile_gated,  // ... the GDN out-projection's gated-norm staging
  gemv_simt,        // dense GEMV, SIMT fallback
  gemv_feed,        // a tile GEMV feeding the next router's logits
  route_fed,        // routing + gate/up in one launch from fed logits
  route_unfed,      // router launch, then gate/up
  up_tile,          // experts' gate/up on tensor cores (fed or not)
  up_simt,
  down_tile,  // experts' down on tensor cores
  down_simt,
  count
};
void note_path(KernelPath p);
// The current device's SM count (queried once; throws tern::Error if the
// query fails).
int sm_count();
// Parts to cut a launch of `blocks` blocks into so that it fills the GPU: 1
// when the blocks already cover every SM, else about two blocks an SM, at
// most `most` (the work's own limits: its length, the scratch it may use).
int fill_splits(int blocks, int most);
// Launches of each path since the last reset (KernelPath order).
std::vector<long> path_counts();
void reset_path_counts();

// n empty kernels chained with programmatic dependent launch, as the decode
// step chains its kernels: tern bench times a graph of them (launch overhead).
cudaError_t empty_kernels(int n, cudaStream_t st);

// Random fills for --dummy weights and synthetic contexts (hash of seed and index).
cudaError_t fill_u32(uint32_t* p, size_t n, uint64_t seed, cudaStream_t st);
// bf16 values lo + (hi-lo)*u.
cudaError_t fill_bf16(uint16_t* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st);
// n scale|bias words: scales uniform in [s_lo, s_hi), biases in [b_lo, b_hi).
cudaError_t fill_scale_bias(uint32_t* p, size_t n, float s_lo, float s_hi, float b_lo, float b_hi,
                            uint64_t seed, cudaStream_t st);

// A scale and a bias (bf16 bits) as one DMat::sb word.
inline uint32_t scale_bias(uint16_t s, uint16_t b) {
  return uint32_t(s) | uint32_t(b) << 16;
}
cudaError_t fill_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st);

// Per-block timestamps (trace.cuh; a TERN_TRACE build). The kinds of the
// traced kernels, as TraceRecord::kind.
enum class TraceKind : uint32_t {
  gemv_early = 1,  // dense GEMVs (weights loaded before the PDL wait)
  gemv_routed,     // route_up
  gemv_late,       // rows known after the wait: experts down
  gdn_step,
  attn_split,
  attn_combine,
};
// A block's phases, in ns since its start (0: the kernel has no such mark;
// `landed`: the tile GEMVs' first batch's last tile in, as warp 0 saw it).
enum class TraceMark : uint32_t {
  waited,
  issued,
  staged,
  landed,
  dotted,
  synced,
  first,
  fetched,
  picked,
  count
};
// The marks' names, in TraceMark's order (the columns of `tern bench --trace`).
constexpr const char* kTraceMarkNames[] = {"waited", "issued", "staged",  "landed", "dotted",
                                           "synced", "first",  "fetched", "picked"};
static_assert(sizeof(kTraceMarkNames) / sizeof(kTraceMarkNames[0]) == size_t(TraceMark::count));
struct TraceRecord {
  uint64_t start_ns;  // globaltimer
  uint32_t kind, block, sm, ended;
  uint32_t mark[uint32_t(TraceMark::count)];
};
struct TraceSink {
  TraceRecord* rec = nullptr;
  unsigned* count = nullptr;
  unsigned capacity = 0;
};
#ifdef TERN_TRACE
// Binds every traced translation unit to s (rec nullptr: off).
cudaError_t trace_bind(const TraceSink& s);
cudaError_t trace_bind_gemv(const TraceSink& s);
cudaError_t trace_bind_moe(const TraceSink& s);
cudaError_t trace_bind_gdn(const TraceSink& s);
cudaError_t trace_bind_attention(const TraceSink& s);
#endif

}  // namespace tern::cuda
