// The CUDA backend: the decode step (T = 1) as 213 kernels (35b-a3b) captured
// into a CUDA graph per sequence and replayed per token. Per-step scalars (token,
// position, step) live in device memory; the step ends with the token choice
// (arg-max, or the sampler with its parameters and token counts on the
// device), which writes the next token into the next step's input, so
// generation needs no host round trip but the streamed copy of each id.
// Prompts run chunk by chunk through the prefill kernels (prefill.cpp,
// prefill_gemm.h, ...): every weight read once a chunk, on tensor cores.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/cuda/device_weights.h"
#include "backends/cuda/trace.h"

namespace tern::cuda {

struct SnapshotPool;  // snapshot_pool.h

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

class CudaSequence : public Sequence {
 public:
  ~CudaSequence() override;
  int capacity = 0;              // KV positions allocated
  std::vector<uint16_t*> k, v;   // per layer (attention only): layout.h's chunked layout
  std::vector<float*> S, conv;   // per layer (GDN only)
  int* ints = nullptr;           // [pos, token, step, saved step]
  int* out = nullptr;            // ring of chosen ids
  int* counts = nullptr;         // sampler: [vocab] token counts of the history
  SampleRules* rules = nullptr;  // sampler parameters
  bool sampled = false;          // the completion chooses with the sampler, not arg-max
  int64_t draws = 0;             // steps of the completion so far: its next id's ring slot
  // The step by how it ends (StepChoice): in arg-max (prefill's forward and
  // greedy completions), in the sampler, or before the choice.
  StepGraph graphs[3];
  StepChoice choice() const { return sampled ? StepChoice::sampler : StepChoice::argmax; }
  int splits = 0;  // the split tier of the step being captured
  friend class CudaBackend;
};

// How forward() runs a prompt (prefill.cpp). Calls of fewer than step_below
// tokens run the decode step graph token by token; longer ones run in chunks
// of at most `chunk` tokens, whose temporaries are allocated once for the
// largest chunk and reused.
struct PrefillOptions {
  int chunk = 8192;
  // Below ~5 tokens the decode step (1.23 ms a token at 4K on the H100) beats a
  // prefill chunk's fixed cost: 6.9 ms for 8 tokens, 8.6 ms for 16 (~5.3 ms +
  // 0.21 ms a token; bench/results/short-moe-bn-9238ccf-h100.txt): the threshold
  // follows that fixed cost, so re-measure both when the short-chunk kernels change.
  int step_below = 6;
  // GDN: the chunked (WY) form from this many tokens a chunk, else the scan (equal at 128,
  // the scan 2-3% faster below, the chunked form faster above at b21e7b3:
  // bench/results/prefill-variants-b21e7b3.txt).
  int chunked_from = 128;
  int moe_bn = 0;    // grouped GEMM slots a tile, 16, 32, 48, 64, 96 or 128; 0: by rows per expert
  int dense_bn = 0;  // dense GEMM slots a tile, 16, 32, 64 or 128; 0: by the chunk's tokens
  int gemm_bm = 0;   // dense GEMM weight rows a tile, 128 or 256; 0: by the tile's slots
  int moe_bm = 0;    // grouped GEMM weight rows a tile, 128 or 256; 0: with moe_bn's choice
};
// Seconds per prefill phase (tern bench --prefill's split), accumulated while
// set: CUDA events between the phases' launches.
enum class PrefillPhase { moe_gemm, dense_gemm, gdn, attention, other, count };
inline const char* const kPrefillPhaseNames[] = {"moe_gemm", "dense_gemm", "gdn", "attention",
                                                 "other"};
struct PrefillProfile {
  double seconds[int(PrefillPhase::count)] = {};
  std::map<std::string, double> kernels;  // the same time by launch (in_proj, delta, ...)
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<const ModelWeights> w);
  explicit CudaBackend(std::unique_ptr<DeviceWeights> w);
  ~CudaBackend() override;

  std::unique_ptr<Sequence> new_sequence() override;
  // Calls of fewer than PrefillOptions::step_below tokens run the decode step
  // token by token; longer ones run in chunks (prefill.cpp).
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  void set_prefill_options(const PrefillOptions& o);
  const PrefillOptions& prefill_options() const { return popt_; }
  int64_t prefill_chunk() const override { return popt_.chunk; }
  // Times the phases of the prefills that follow into *p (nullptr: off).
  void set_prefill_profile(PrefillProfile* p) { profile_ = p; }
  const ModelConfig& config() const override { return w_->cfg; }
  std::string name() const override { return "cuda"; }

  // The completion's state on the device: arg-max when p is greedy, else the
  // sampler with p, the counts of `history` and draw counter 0.
  void start_sampling(Sequence& seq, const SamplingParams& p,
                      std::span<const int32_t> history) override;
  // Streams with the choice on the device, one step ahead of the caller.
  void generate(Sequence& seq, int32_t first, int max_tokens,
                const std::function<bool(int32_t)>& on_token,
                const GenerateHooks& hooks = {}) override;
  std::unique_ptr<SequenceState> save(const Sequence& seq) override;
  void restore(Sequence& seq, const SequenceState& st) override;
  std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) override;
  size_t sequence_bytes(const Sequence& seq) const override;
  // The stream every call's work is ordered on (for the tests).
  cudaStream_t stream() const { return stream_; }
  // Kernels in the step (captured on demand).
  int step_kernels(Sequence& seq);
  // For tern bench: makes room for n positions, fills the KV cache and state
  // with random values and sets the length (no real prefill).
  void fill_synthetic(Sequence& seq, int64_t length, uint64_t seed);
  void set_length(Sequence& seq, int64_t length);
  // For tern bench --leave-out: leaves the named kernels (leave_out.h) out
  // of the step graphs captured afterwards, which then time the rest (the
  // tokens are no longer the model's). Throws on an unknown name.
  void leave_out(const std::set<std::string>& names);
  // Seconds for n greedy steps (graph replays), timed with CUDA events.
  double time_steps(Sequence& seq, int n);
  // For tern bench --trace (a TERN_TRACE build; throws otherwise): the
  // per-block records of n steps (trace.cuh), after a warm-up step.
  std::vector<TraceRecord> trace_steps(Sequence& seq, int n);
  void reserve(CudaSequence& s, int64_t n);
  const DeviceWeights& weights() const { return *w_; }

  static constexpr int kOutRing = 1 << 16;

 private:
  std::set<std::string> left_out_;

  void init();
  struct PrefillBuffers;
  // Tokens [0, T) of tokens_dev through the model at the sequence's end;
  // the logits `which` asks for into host memory (the last row's, or all T).
  void run_chunk(CudaSequence& s, const int* tokens_dev, int T, Logits which, float* logits);
  void forward_steps(CudaSequence& s, std::span<const int32_t> tokens, Logits which,
                     std::vector<float>& logits);
  PrefillBuffers& prefill_buffers(int T);
  PrefillOptions popt_;
  PrefillProfile* profile_ = nullptr;
  std::unique_ptr<PrefillBuffers> pf_;
  // Copies every GDN layer's recurrent and conv state from `from` to `to`.
  void copy_state(const std::vector<float*>& from_S, const std::vector<float*>& from_conv,
                  const std::vector<float*>& to_S, const std::vector<float*>& to_conv);
  void set_position(CudaSequence& s, int64_t length);
  void enqueue_step(CudaSequence& s, StepChoice choice);
  // The token choice at the end of a step: arg-max or the sampler, then the
  // hand-off of the id (misc.h, sample.h).
  void enqueue_choice(CudaSequence& s, bool sampled);
  StepGraph& ensure_graph(CudaSequence& s, StepChoice choice);
  void run_step(CudaSequence& s, StepChoice choice);
  float* buf(size_t n);

  std::unique_ptr<DeviceWeights> w_;
  std::shared_ptr<SnapshotPool> snapshots_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> bufs_;
  float *h_, *a_, *proj_, *convout_, *gdn_y_, *part_, *attn_, *rlogits_, *wts_, *act_, *logits_,
      *amax_;
  int* ids_;
  unsigned* counters_;        // [router, argmax]
  unsigned long long* feed_;  // [n_experts + 1] router logits fed by o_proj / out_proj
  void* sample_scratch_;
  int* ids_out_ = nullptr;       // pinned [2]: streamed ids, alternating
  float* logits_out_ = nullptr;  // pinned [2][vocab] for GenerateHooks::on_logits (on first use)
  cudaEvent_t id_ready_[2] = {};
  uint32_t* mask_host_ = nullptr;  // pinned [mask words]: the constraint's mask (on first use)
  uint32_t* mask_dev_ = nullptr;   // its copy on the device
};

}  // namespace tern::cuda

namespace tern::cuda {
// Device-to-device copy bandwidth (read + write counted), bytes/s.
double copy_bandwidth();
// The bf16 matrix rate (an 8192^3 cuBLAS GEMM, cuBLAS loaded at run time),
// FLOP/s; 0 without cuBLAS (matrix_rate.cpp).
double bf16_matrix_rate();
// Device memory in use (bytes), all processes.
size_t device_memory_used();
// Seconds per replay of a graph of n empty kernels chained as the step's are.
double launch_overhead(int n);
}  // namespace tern::cuda
