// The CUDA backend: the Backend interface on the GPU. Its sequences
// (cuda_sequence.h) hold the KV cache and the recurrent state on the device;
// prompts run in chunks through the prefill kernels (prefill.h), calls of a
// few tokens and generation through the decode step graph (decode_step.h),
// one step ahead of the host, which only copies each chosen id out. Session
// snapshots are device copies of the GDN state from a pool of blocks
// (snapshot_pool.h). tern bench and the tests reach further in through
// CudaBench (cuda_bench.h).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/cuda/cuda_sequence.h"
#include "backends/cuda/device_weights.h"
#include "backends/cuda/prefill_tiles.h"
#include "backends/cuda/staging.h"

namespace tern::cuda {

class DecodeStep;
class Prefill;
struct SnapshotPool;

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<const ModelWeights> w);
  explicit CudaBackend(std::unique_ptr<DeviceWeights> w);
  ~CudaBackend() override;

  std::unique_ptr<Sequence> new_sequence() override;
  // Calls of fewer than PrefillOptions::step_below tokens run the decode step
  // token by token; longer ones run in chunks of at most PrefillOptions::chunk.
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  void set_prefill_options(const PrefillOptions& o);
  const PrefillOptions& prefill_options() const;
  int64_t prefill_chunk() const override { return prefill_options().chunk; }
  const ModelConfig& config() const override { return w_->cfg; }
  std::string name() const override { return "cuda"; }
  size_t memory_free() const override;  // the device's

  // The completion's state on the device: arg-max when p is greedy, else the
  // sampler with p, the counts of `history` and draw counter 0.
  void start_sampling(Sequence& seq, const SamplingParams& p,
                      std::span<const int32_t> history) override;
  // Streams with the choice on the device, one step ahead of the caller.
  void generate(Sequence& seq, int32_t first, int max_tokens,
                const std::function<bool(int32_t)>& on_token,
                const GenerateHooks& hooks = {}) override;
  // One graph over the rows (kMaxRows at a time, more in waves): each launch
  // covers every row, the dense GEMVs read each weight tile once for all,
  // and row j computes in lane j's scratch exactly as it would alone
  // (docs/kernels/cuda-decode.md). A lone row runs its own step graph.
  void step(std::span<StepRow> rows) override;
  std::unique_ptr<SequenceState> save(const Sequence& seq) override;
  void restore(Sequence& seq, const SequenceState& st) override;
  std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) override;
  size_t sequence_bytes(const Sequence& seq) const override;
  // The device's compute capability and SM count (launch splits follow it)
  // and the prefill options.
  // A new request waits at most this many of a lone stream's steps (~20 ms).
  int generate_slice() const override { return 16; }
  std::string numerics_id() const override;
  // Whole 16-position KV chunks (layout.h) covering [from, to).
  size_t kv_bytes(int64_t from, int64_t to) const override;
  void export_kv(const Sequence& seq, int64_t from, int64_t to, const ByteSink& out) override;
  void reserve(Sequence& seq, int64_t positions) override {
    reserve(dynamic_cast<CudaSequence&>(seq), positions);
  }
  void import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) override;
  size_t state_bytes() const override;
  void export_state(const SequenceState& st, const ByteSink& out) const override;
  std::unique_ptr<SequenceState> import_state(int64_t length, const ByteSource& in) override;

 private:
  friend class CudaBench;
  // Pinned buffers a step's end copies through, made on the first call that
  // wants them: `slots` rows of raw logits, the constraint's mask and its
  // copy on the device.
  struct StepIo {
    float* logits = nullptr;        // [slots][vocab], for GenerateHooks::on_logits
    uint32_t* mask_host = nullptr;  // [mask words]
    uint32_t* mask_dev = nullptr;
    void prepare(const GenerateHooks& hooks, int vocab, int slots);
    StepIo() = default;
    StepIo(const StepIo&) = delete;
    StepIo& operator=(const StepIo&) = delete;
    ~StepIo();
  };
  // A lane of step(): its decode step's scratch, its stream (lane 0's is
  // stream_, which every single-sequence call uses with that lane's step
  // graphs) and pinned buffers for one row a wave.
  struct Lane {
    std::unique_ptr<DecodeStep> step;
    cudaStream_t stream = nullptr;
    bool own_stream = false;
    int* ids = nullptr;  // [0] the token fed, [1] the id chosen
    StepIo io;           // one slot
    ~Lane();
  };
  DecodeStep& step0() const { return *lanes_[0]->step; }

  void init();
  // Room for n positions in s's KV cache (grown by copying the chunks in use).
  void reserve(CudaSequence& s, int64_t n);
  // s's length, on the host and as the next step's position on the device.
  void set_position(CudaSequence& s, int64_t length);
  // The step graph for s's next position on `step`'s lane (room made first).
  StepGraph& step_graph(CudaSequence& s, StepChoice choice, DecodeStep& step);
  // One step through it, on the lane's stream.
  void run_step(CudaSequence& s, StepChoice choice, DecodeStep& step);
  // The end of a step of s after its forward on `step`'s lane (its stream):
  // the raw logits into io's slot `slot` when hooks want them, under a
  // constraint the mask (through io) and the choice, then the chosen id to `id`.
  void end_step(CudaSequence& s, DecodeStep& step, const GenerateHooks& hooks, const StepIo& io,
                int slot, int* id);
  // A wave of step(): the rows' forward in one graph, then each row's end on
  // its lane, then its id taken once the lane is done.
  void step_wave(std::span<StepRow> rows);
  void finish_row(Lane& lane, StepRow& r);
  // The graph of a wave of n rows, kept per n and captured again (updated in
  // place where it can) when its rows' sequences, buffers, split tiers or
  // choices change.
  struct RowsGraph {
    std::vector<uint64_t> key;
    cudaGraphExec_t exec = nullptr;
    RowsGraph() = default;
    RowsGraph(const RowsGraph&) = delete;
    RowsGraph& operator=(const RowsGraph&) = delete;
    ~RowsGraph();
  };
  // forward() of a few tokens: the arg-max step graph token by token.
  void forward_steps(CudaSequence& s, std::span<const int32_t> tokens, Logits which,
                     std::vector<float>& logits);
  // A snapshot's state block from the pool, its contents not yet written.
  std::unique_ptr<SequenceState> new_state(int64_t length);
  // The KV chunks covering [from, to) of every attention layer, K then V,
  // head by head: the order of their bytes in the disk cache's files.
  std::vector<DeviceBytes> kv_stretches(const CudaSequence& s, int64_t from, int64_t to) const;
  // Copies every GDN layer's recurrent and conv state from `from` to `to`.
  void copy_state(const std::vector<float*>& from_S, const std::vector<float*>& from_conv,
                  const std::vector<float*>& to_S, const std::vector<float*>& to_conv);

  std::unique_ptr<DeviceWeights> w_;
  int device_ = 0;  // the disk cache's writer thread copies snapshots from it
  std::shared_ptr<SnapshotPool> snapshots_;
  cudaStream_t stream_ = nullptr;                    // every call's work, in order
  std::vector<std::unique_ptr<Lane>> lanes_;         // kStepLanes
  cudaEvent_t lanes_go_ = nullptr;                   // a wave's forward, before its rows' ends
  std::array<RowsGraph, kMaxRows + 1> rows_graphs_;  // by rows, 2..kMaxRows
  std::unique_ptr<Prefill> prefill_;
  int* ids_out_ = nullptr;  // pinned [2]: streamed ids, alternating
  StepIo io_;               // generate()'s: two slots, alternating
  cudaEvent_t id_ready_[2] = {};
  Staging staging_;                 // the disk cache's loads and KV pieces (engine thread)
  mutable Staging writer_staging_;  // export_state on the disk cache's writer thread
  mutable cudaStream_t writer_stream_ = nullptr;
};

}  // namespace tern::cuda
