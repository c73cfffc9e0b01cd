// The decode step (T = 1): the model's launches for one token, layer by layer,
// captured into a CUDA graph per sequence and way of ending (StepChoice) and
// replayed per token (213 kernels for 35b-a3b). Per-step scalars are the
// sequence's StepScalars on the device; the step ends with the token choice
// (arg-max, or the sampler with its parameters and token counts on the
// device), which writes the next step's input, so generation needs no host
// round trip but the streamed copy of each id (CudaBackend::generate).
// docs/kernels/cuda-decode.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_sequence.h"
#include "backends/cuda/device_weights.h"
#include "backends/cuda/moe.h"

namespace tern::cuda {

class DecodeStep {
 public:
  // Allocates the step's scratch (zeroed on st) for step lane `lane`: its
  // graphs are the sequences' graphs[lane] and run on st.
  DecodeStep(const DeviceWeights& w, cudaStream_t st, int lane);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // The graph of s's next step ending in `choice`, captured when missing or
  // when the attention split tier moved. s must have room for the position.
  StepGraph& graph(CudaSequence& s, StepChoice choice);
  // The token choice alone (after a StepChoice::none graph and the host's
  // mask): arg-max or the sampler, then the hand-off of the id.
  void enqueue_choice(CudaSequence& s, bool sampled);
  // The logits of the last step, [vocab] on the device.
  float* logits() const { return logits_; }
  cudaStream_t stream() const { return st_; }
  int lane() const { return lane_; }

  // Kernels by leave_out.h's names that the graphs captured afterwards leave
  // out: tern bench --leave-out (CudaBench::leave_out) times the step without
  // them, so its tokens are no longer the model's.
  std::set<std::string> left_out;

 private:
  struct Layer;
  void enqueue(CudaSequence& s, StepChoice choice, int splits);
  Layer layer(const CudaSequence& s, int i, int splits) const;
  void embed(const CudaSequence& s);
  void gdn_forward(const Layer& l);
  void attention_forward(const Layer& l);
  void moe_forward(const Layer& l);
  void lm_head();
  // A layer's routing and gate/up arguments, unfed.
  RouterArgs router_args(const DevLayer& L) const;
  ExpertsUpArgs up_args(const DevLayer& L) const;
  float* buf(size_t n);
  template <typename F>
  void launch(const char* what, F&& enqueue);

  const DeviceWeights& w_;
  cudaStream_t st_;
  int lane_;
  std::vector<void*> bufs_;
  // Per layer, the feed its router reads (0 or 1; the other is the one it
  // zeroes for the next), or -1: the router runs on its own.
  std::vector<int> feed_turn_;
  float *h_, *a_, *proj_, *convout_, *gdn_y_, *part_, *attn_, *rlogits_, *wts_, *act_, *logits_,
      *amax_;
  int* ids_;
  unsigned* counters_;  // [router, argmax]
  unsigned long long*
      feed_;  // [2][kFeedCopies][n_experts + 1] router logits fed by o_proj / out_proj
  void* sample_scratch_;
};

}  // namespace tern::cuda
