// The CUDA backend: the decode step (T = 1) as ~265 kernels captured once into
// a CUDA graph per sequence and replayed per token. Per-step scalars (token,
// position, step) live in device memory; the arg-max kernel writes the next
// token into the next step's input, so greedy generation needs no host
// round trip. Prefill runs the same step token by token (prefill kernels are a
// later issue).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "backends/cuda/device_weights.h"
#include "engine/backend.h"

namespace tern::cuda {

class CudaSequence : public Sequence {
 public:
  ~CudaSequence() override;
  int capacity = 0;                 // KV positions allocated
  std::vector<uint16_t*> k, v;      // per layer (attention only): bf16 [kv][capacity][256]
  std::vector<float*> S, conv;      // per layer (GDN only)
  int* ints = nullptr;              // [pos, token, step]
  int* out = nullptr;               // ring of chosen ids
  cudaGraphExec_t graph = nullptr;  // captured step, valid for `splits`
  int splits = 0;
  friend class CudaBackend;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<const ModelWeights> w);
  explicit CudaBackend(std::unique_ptr<DeviceWeights> w);
  ~CudaBackend() override;

  std::unique_ptr<Sequence> new_sequence() override;
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  const ModelConfig& config() const override { return w_->cfg; }
  std::string name() const override { return "cuda"; }

  // Greedy decoding of n tokens after `first`, all on the device.
  std::vector<int32_t> generate_greedy(Sequence& seq, int32_t first, int n);
  // For tern bench: makes room for n positions, fills the KV cache and state
  // with random values and sets the length (no real prefill).
  void fill_synthetic(Sequence& seq, int64_t length, uint64_t seed);
  void set_length(Sequence& seq, int64_t length);
  // Seconds for n greedy steps (graph replays), timed with CUDA events.
  double time_steps(Sequence& seq, int n);
  void reserve(CudaSequence& s, int64_t n);
  const DeviceWeights& weights() const { return *w_; }

  static constexpr int kOutRing = 1 << 16;

 private:
  void init();
  void enqueue_step(CudaSequence& s);
  void run_step(CudaSequence& s);
  float* buf(size_t n);

  std::unique_ptr<DeviceWeights> w_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> bufs_;
  float *h_, *a_, *proj_, *convout_, *gdn_y_, *q_, *part_, *attn_, *rlogits_, *wts_, *act_,
      *logits_, *amax_;
  int* ids_;
  unsigned* counters_;  // [router, argmax]
};

}  // namespace tern::cuda

namespace tern::cuda {
// Device-to-device copy bandwidth (read + write counted), bytes/s.
double copy_bandwidth();
// Device memory in use (bytes), all processes.
size_t device_memory_used();
}  // namespace tern::cuda
