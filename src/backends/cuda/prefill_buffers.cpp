#include "backends/cuda/prefill_buffers.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/attn_prefill.h"
#include "backends/cuda/check.h"
#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_gemm.h"

namespace tern::cuda {

Prefill::Buffers::~Buffers() {
  for (void* p : ptrs) cudaFree(p);
}

Prefill::Buffers& Prefill::buffers(int T) {
  if (b_ != nullptr && b_->T >= T) return *b_;
  check(cudaStreamSynchronize(st_), "prefill buffers");  // earlier chunks may use the old ones
  const int64_t token_cap = b_ != nullptr ? b_->token_cap : 0;
  int* tokens = b_ != nullptr ? b_->tokens : nullptr;
  if (b_ != nullptr) {  // the token buffer moves over
    b_->ptrs.erase(std::find(b_->ptrs.begin(), b_->ptrs.end(), static_cast<void*>(tokens)));
    b_.reset();
  }
  const ModelConfig& c = w_.cfg;
  auto b = std::make_unique<Buffers>();
  b->T = T;
  b->tokens = tokens, b->token_cap = token_cap;
  if (tokens != nullptr) b->ptrs.push_back(tokens);
  auto alloc = [&](auto*& p, size_t n) {
    void* q = nullptr;
    check(cudaMalloc(&q, std::max<size_t>(n, 1) * sizeof(*p)), "cudaMalloc of prefill buffers");
    b->ptrs.push_back(q);
    p = static_cast<std::remove_reference_t<decltype(p)>>(q);
  };
  const size_t t = size_t(T), D = size_t(c.hidden), E = size_t(c.n_experts);
  const size_t K1 = size_t(c.top_k + 1), A = t * K1, I = size_t(c.moe_inter);
  const size_t Hk = size_t(c.lin_k_heads), Hv = size_t(c.lin_v_heads), H = size_t(c.n_heads);
  const size_t in_rows = size_t(c.conv_channels() + c.lin_value_dim() + 2 * c.lin_v_heads);
  const size_t qkv_rows = size_t(2 * c.n_heads + 2 * c.n_kv_heads) * kHeadDim;
  const size_t max_k = std::max({D, Hv * kGdnDim, H * kHeadDim, I});
  const bool gdn = c.n_linear_layers() > 0, attn = c.n_full_layers() > 0;
  alloc(b->h, t * D);
  alloc(b->x16, t * max_k);
  alloc(b->xscale, t);
  alloc(b->a32, t * D);
  alloc(b->proj, t * std::max(gdn ? in_rows : 0, attn ? qkv_rows : 0));
  alloc(b->o, t * std::max(Hv * kGdnDim, attn ? H * kHeadDim : 0));
  if (gdn) {
    alloc(b->q, t * Hk * kGdnDim);
    alloc(b->k, t * Hk * kGdnDim);
    alloc(b->v, t * Hv * kGdnDim);
    alloc(b->beta, t * Hv);
    alloc(b->g, t * Hv);
    alloc(b->delta, delta_scratch_floats(T, int(Hk), int(Hv)));
  }
  if (attn) {
    alloc(b->q16, H * t * kHeadDim);
    b->flash_floats = flash_work_floats(c.n_heads, c.n_kv_heads);
    alloc(b->flash_work, b->flash_floats);
  }
  b->gemm_floats = gemm_work_floats();
  alloc(b->gemm_work, b->gemm_floats);
  alloc(b->rlogits, router_logit_floats(int(t), E + 1));
  alloc(b->counts, E + 1);
  check(cudaMemsetAsync(b->counts, 0, (E + 1) * sizeof(int), st_), "counts");
  alloc(b->offsets, E + 2);
  alloc(b->cursor, E + 1);
  alloc(b->ids, t * size_t(c.top_k));
  alloc(b->wts, A);
  alloc(b->slot_row, A);
  alloc(b->slot_w, A);
  alloc(b->token_slot, A);
  b->tile_cap = route_max_tiles(T, c.n_experts, c.top_k, 16);  // the narrowest tiles
  alloc(b->map, size_t(b->tile_cap));
  alloc(b->map_count, 1);
  alloc(b->act, A * I);
  alloc(b->y16, A * D);
  alloc(b->lbuf, size_t(Buffers::kLogitRows) * size_t(c.vocab));
  b_ = std::move(b);
  return *b_;
}

const int* Prefill::upload(std::span<const int32_t> tokens) {
  const int64_t n = int64_t(tokens.size());
  Buffers& b = buffers(int(std::min<int64_t>(n, opt_.chunk)));
  if (b.token_cap < n) {
    if (b.tokens != nullptr) {
      b.ptrs.erase(std::find(b.ptrs.begin(), b.ptrs.end(), static_cast<void*>(b.tokens)));
      cudaFree(b.tokens);
    }
    void* p = nullptr;
    check(cudaMalloc(&p, size_t(n) * sizeof(int)), "cudaMalloc of prefill tokens");
    b.tokens = static_cast<int*>(p), b.token_cap = n;
    b.ptrs.push_back(p);
  }
  check(cudaMemcpyAsync(b.tokens, tokens.data(), size_t(n) * sizeof(int), cudaMemcpyHostToDevice,
                        st_),
        "tokens");
  return b.tokens;
}

}  // namespace tern::cuda
