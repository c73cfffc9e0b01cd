// The fast CPU backend (--backend cpu, the default): the reference's model and
// sequence state (ReferenceSequence: fp32 conv and recurrent state, fp32 K/V rows),
// computed with 4-bit x int8 integer dot products, fused MoE, blocked
// attention and the chunked delta rule, on a spinning work pool, with the
// kernels of the widest instruction set the CPU has (kernels.h). Prompts are
// processed in chunks of at most 512 tokens; buffers grow to the largest call
// and are reused, so decode allocates nothing per token.
#pragma once

#include <memory>

#include "backends/cpu/kernels.h"
#include "backends/reference/reference_backend.h"

namespace tern {

namespace cpu {
class Model;
constexpr int64_t kMaxChunk = 512;  // tokens of a prompt processed at once

// Seconds per part of decode's forward passes (calls of one token; tern bench
// --split), accumulated while set: the host clock around each part's pool
// runs, which return when done.
enum class Part { norm, gdn, attention, moe, head, count };
inline const char* const kPartNames[] = {"norm", "gdn", "attention", "moe", "head"};
struct PartTimes {
  double seconds[int(Part::count)] = {};
};
}  // namespace cpu

class FastCpuBackend : public ReferenceBackend {
 public:
  // int8_activations false: every matmul in fp32 (the reference's arithmetic
  // in this backend's structure; tests pin the structure with it).
  explicit FastCpuBackend(std::shared_ptr<const ModelWeights> w, cpu::Isa isa = cpu::default_isa(),
                          bool int8_activations = true);
  ~FastCpuBackend() override;
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  // The sequences' rows in one forward pass: each weight read once for all,
  // each row's arithmetic as alone (docs/cpu-backend.md).
  void step(std::span<StepRow> rows) override;
  // Whole chunks: the MoE reuses each expert's weights over more rows.
  int64_t prefill_chunk() const override { return cpu::kMaxChunk; }
  std::string name() const override { return "cpu"; }
  // The kernel table, int8 activations, the repacked layout and the threads
  // (attention splits its keys by them).
  std::string numerics_id() const override;
  cpu::Isa isa() const;
  void set_part_times(cpu::PartTimes* t);

 private:
  std::unique_ptr<cpu::Model> model_;
  std::vector<float> step_logits_;
  std::vector<uint32_t> step_mask_;
};

}  // namespace tern
