// A sequence on the GPU: every layer's KV cache or GDN state, the decode
// step's scalars in device memory, the ring of chosen ids, the sampler's
// state, and the step graphs captured for it (decode_step.h). CudaBackend
// makes, grows, snapshots and forks it (cuda_backend.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/sampling_rules.h"
#include "backends/cuda/rows.h"

namespace tern::cuda {

// A captured decode step, valid for its attention split tier.
struct StepGraph {
  cudaGraphExec_t exec = nullptr;
  int splits = 0;
  int kernels = 0;  // nodes
  void reset();
};

// How a step graph ends: the arg-max, the sampler, or no choice (constrained
// decoding masks the logits with the host's mask first, outside the graph).
enum class StepChoice { argmax, sampler, none };

// Step lanes (CudaBackend::step): each its own stream and scratch; row j of
// a step over several sequences computes in lane j's scratch.
constexpr int kStepLanes = kMaxRows;

// The decode step's scalars, one block of device memory a sequence: the
// captured graphs read them in place, so a replay needs no host copy. The
// choice (argmax_advance, sample_advance) writes the chosen id into `token`
// and advances `step` and `pos`; the host writes them only between steps.
struct StepScalars {
  int pos;         // the next step's position: its KV slot and rotary angle
  int token;       // the next step's input
  int step;        // the completion's draws so far: the sampler's draw and the id's ring slot
  int saved_step;  // `step`, kept aside while forward() runs arg-max steps
};

// A layer's state in a sequence: the GDN recurrent and conv state, or the
// attention layer's KV cache (the other pair null).
struct LayerState {
  float* S = nullptr;
  float* conv = nullptr;
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
};

class CudaSequence : public Sequence {
 public:
  ~CudaSequence() override;
  static constexpr int kOutRing = 1 << 16;  // ids in the ring of chosen ids

  int capacity = 0;                // KV positions allocated
  std::vector<uint16_t*> k, v;     // per layer (attention only): layout.h's chunked layout
  std::vector<float*> S, conv;     // per layer (GDN only)
  StepScalars* scalars = nullptr;  // on the device
  int* out = nullptr;              // ring of kOutRing chosen ids
  int* counts = nullptr;           // sampler: [vocab] token counts of the history
  SampleRules* rules = nullptr;    // sampler parameters
  bool sampled = false;            // the completion chooses with the sampler, not arg-max
  int64_t draws = 0;               // steps of the completion so far: its next id's ring slot
  // The step by how it ends (StepChoice): in arg-max (prefill's forward and
  // greedy completions), in the sampler, or before the choice.
  StepGraph graphs[3];
  // Which device buffers the captured graphs hold: a new number whenever
  // they change (a step over several sequences keys its graph by them).
  uint64_t buffers = 0;
  StepChoice choice() const { return sampled ? StepChoice::sampler : StepChoice::argmax; }
  LayerState layer(int i) const {
    const auto at = size_t(i);
    return {S[at], conv[at], k[at], v[at]};
  }
  friend class CudaBackend;
};

}  // namespace tern::cuda
