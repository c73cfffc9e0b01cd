// Launchers of the MoE decode kernels (moe.cu): the routing of one token and
// its experts' gate/up/SwiGLU (one launch from the logits the GEMV before fed,
// else two), and down with the routing weights and the residual add.
#pragma once

#include "backends/cuda/gemv.h"
#include "backends/cuda/layout.h"

namespace tern::cuda {

// Whether the tensor-core paths take the experts' stacks in the tile layout
// (the loader tiles exactly these): the gate/up stack (expert width `inter`),
// the down stack (`hidden` rows an expert).
bool up_tiles(const DMat& gate_up, int inter);
bool down_tiles(const DMat& down, int hidden, int top_k);

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
// The same for each row of a step (rows.h): each row's routing and experts as
// alone, its blocks beside the other rows' in one launch.
cudaError_t route_experts_up_rows(const RouterArgs* r, const ExpertsUpArgs* u, int n,
                                  cudaStream_t st);
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
cudaError_t experts_down_rows(const ExpertsDownArgs* rows, int n, cudaStream_t st);

}  // namespace tern::cuda
