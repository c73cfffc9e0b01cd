// The decode step (T = 1): the model's launches for one token, layer by layer,
// captured into a CUDA graph per sequence and way of ending (StepChoice) and
// replayed per token (213 kernels for 35b-a3b). Per-step scalars are the
// sequence's StepScalars on the device; the step ends with the token choice
// (arg-max, or the sampler with its parameters and token counts on the
// device), which writes the next step's input, so generation needs no host
// round trip but the streamed copy of each id (CudaBackend::generate). Several
// sequences a step share one graph, each launch covering all of them
// (enqueue_rows). docs/kernels/cuda-decode.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_sequence.h"
#include "backends/cuda/device_weights.h"
#include "backends/cuda/gdn.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/moe.h"
#include "backends/cuda/sample.h"

namespace tern::cuda {

// One launch of a row's step before the choice: its kernel's name
// (leave_out.h) and arguments.
struct RouteUp {
  RouterArgs r;
  ExpertsUpArgs u;
};
struct StepLaunch {
  const char* what;
  std::variant<EmbedArgs, GemvArgs, GdnStepArgs, AttnDecodeArgs, RouteUp, ExpertsDownArgs> args;
};

// A row of a step over several sequences: the sequence, the lane whose
// scratch it computes in, how its step ends and its attention split tier.
struct StepRowOn {
  CudaSequence* seq;
  const class DecodeStep* lane;
  StepChoice choice;
  int splits;
};

// Captures what `enqueue` launches on st into exec: updated in place when
// the launches' shapes allow, else instantiated anew. Returns the nodes.
int capture_graph(cudaStream_t st, cudaGraphExec_t& exec, const std::function<void()>& enqueue);

class DecodeStep {
 public:
  // Allocates the step's scratch (zeroed on st). The backend's first lane
  // captures the sequences' own graphs (CudaSequence::graphs) and runs them
  // on st; in a step over several sequences, row j computes in lane j's
  // scratch (enqueue_rows).
  DecodeStep(const DeviceWeights& w, cudaStream_t st);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // The graph of s's next step ending in `choice`, captured when missing or
  // when the attention split tier moved. s must have room for the position.
  StepGraph& graph(CudaSequence& s, StepChoice choice);
  // The token choice alone (after a StepChoice::none graph and the host's
  // mask): arg-max or the sampler, then the hand-off of the id.
  void enqueue_choice(CudaSequence& s, bool sampled);
  // One step of every row on st, each in its lane's scratch, each launch
  // covering all rows (rows.h), each row ending as its choice says.
  static void enqueue_rows(std::span<const StepRowOn> rows, cudaStream_t st);
  // The logits of the last step, [vocab] on the device.
  float* logits() const { return logits_; }
  cudaStream_t stream() const { return st_; }

  // Kernels by leave_out.h's names that the graphs captured afterwards leave
  // out: tern bench --leave-out (CudaBench::leave_out) times the step without
  // them, so its tokens are no longer the model's.
  std::set<std::string> left_out;

 private:
  struct Layer;
  void enqueue(CudaSequence& s, StepChoice choice, int splits);
  // The launches of s's step before the choice, in order.
  std::vector<StepLaunch> plan(const CudaSequence& s, int splits) const;
  Layer layer(const CudaSequence& s, int i, int splits) const;
  void gdn_forward(const Layer& l, std::vector<StepLaunch>& out) const;
  void attention_forward(const Layer& l, std::vector<StepLaunch>& out) const;
  void moe_forward(const Layer& l, std::vector<StepLaunch>& out) const;
  ArgmaxArgs argmax_args(CudaSequence& s) const;
  SampleArgs sample_args(CudaSequence& s) const;
  // A layer's routing and gate/up arguments, unfed.
  RouterArgs router_args(const DevLayer& L) const;
  ExpertsUpArgs up_args(const DevLayer& L) const;
  float* buf(size_t n);

  const DeviceWeights& w_;
  cudaStream_t st_;
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
