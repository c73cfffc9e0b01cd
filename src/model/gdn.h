// Gated DeltaNet (linear attention) on the CPU, fp32 throughout: the causal
// conv with its carried state, q/k L2 norms, the gates, the delta rule in its
// token-by-token (recurrent) and chunked forms (docs/model.md §DeltaNet,
// §DeltaNet chunked), the gated RMSNorm and the output projection.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/weights.h"

namespace tern::model {

struct GdnState {
  std::vector<float> conv;  // [(kernel-1)][channels]: last pre-conv rows, oldest first
  std::vector<float> S;     // [v_heads][k_dim][v_dim] recurrent state
};

GdnState make_gdn_state(const ModelConfig& c);  // zeros
size_t gdn_conv_floats(const ModelConfig& c);
size_t gdn_state_floats(const ModelConfig& c);  // S

enum class DeltaForm { automatic, recurrent, chunked };

// The delta rule for one value head over T tokens. q, k: [T][dk] (normalised,
// q already scaled), v: [T][dv], g: log-decay, beta: [T]. S: [dk][dv], updated
// in place. o: [T][dv].
void delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, int64_t T, int dk, int dv, float* S, float* o);
void delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                        const float* beta, int64_t T, int dk, int dv, float* S, float* o,
                        int chunk = 64);

// x *= scale / sqrt(sum(x^2) + 1e-6): the q/k normalisation (no weight).
void l2_normalize(float* x, int n, float scale);

// x: [T][hidden] (already normed) -> out: [T][hidden]; state carried across calls.
void gdn_forward(const ModelConfig& c, const GdnWeights& w, const float* x, int64_t T, GdnState& st,
                 float* out, DeltaForm form = DeltaForm::automatic);

}  // namespace tern::model
