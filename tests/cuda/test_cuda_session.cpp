// The CUDA backend's session state and stream order: tests/backend_checks.h
// on the GPU, a restore that must wait for the stream's earlier work, and the
// sampler's state across calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <type_traits>

#include "backend/constraint.h"
#include "backend_checks.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_bench.h"
#include "backends/cuda/layout.h"
#include "backends/reference/reference_backend.h"
#include "gpu_test_util.h"

namespace tern::test {

cudaError_t delay_fill(float* p, size_t n, float v, long long ns, cudaStream_t st);

namespace {

static_assert(!std::is_copy_constructible_v<cuda::CudaSequence>);
static_assert(!std::is_copy_assignable_v<cuda::CudaSequence>);

// A completion of 32 tokens after an 8-token prefill, generated in calls of
// 5, 11 and 16 tokens (each continuing the last), optionally constrained.
std::vector<int32_t> split_generation(Backend& be, const SamplingParams& p,
                                      TokenConstraint* constraint = nullptr) {
  auto s = be.new_sequence();
  const auto prompt = ids_from(9, 21, be.config().vocab);
  std::vector<float> logits;
  be.forward(*s, std::span(prompt).first(8), Logits::last, logits);
  be.start_sampling(*s, p, prompt);
  GenerateHooks hooks;
  hooks.constraint = constraint;
  std::vector<int32_t> ids;
  int32_t next = prompt.back();
  for (int n : {5, 11, 16}) {
    be.generate(
        *s, next, n,
        [&](int32_t t) {
          ids.push_back(t);
          return true;
        },
        hooks);
    next = ids.back();
  }
  return ids;
}

TEST(CudaSession, SaveRestoreForkGiveTheUninterruptedLogits) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend be(tiny_dummy_weights());
  check_save_restore_fork(be);
}

TEST(CudaSession, DiskCacheBytesRoundTripExactly) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend be(tiny_dummy_weights());
  check_bytes_round_trip(be);
}

TEST(CudaSession, SequencesSteppedTogetherDecodeAsAlone) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend be(tiny_dummy_weights());
  check_step_equals_alone(be);
}

TEST(CudaSession, SplitGenerationEqualsOneCall) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend be(tiny_dummy_weights());
  check_split_generation(be, SamplingParams{});
  check_split_generation(be, chat_sampling(9));
}

TEST(CudaSession, SplitGenerationEqualsTheCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  for (const SamplingParams& p : {SamplingParams{}, chat_sampling(4)})
    EXPECT_EQ(split_generation(gpu, p), split_generation(cpu, p))
        << (p.greedy() ? "greedy" : "sampled");
}

// Constrained decoding on the GPU (forward graph, host mask, masked choice)
// chooses what the CPU's masked sampler does, greedy and seeded, across
// several generate() calls, and only allowed tokens.
TEST(CudaSession, ConstrainedGenerationEqualsTheCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  for (const SamplingParams& p : {SamplingParams{}, chat_sampling(4)}) {
    HashConstraint on_gpu(gpu.config().vocab), on_cpu(cpu.config().vocab);
    EXPECT_EQ(split_generation(gpu, p, &on_gpu), split_generation(cpu, p, &on_cpu))
        << (p.greedy() ? "greedy" : "sampled");
  }
}

TEST(CudaSession, SamplingHistoryIsBounded) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend be(tiny_dummy_weights());
  check_history_bounds(be);
}

// A kernel on the backend's stream spins for 50 ms, then poisons the
// recurrent state with NaN; restore() right after must copy the snapshot in
// only once that is done (stream order), so the logits come out finite and
// equal to the uninterrupted run's. A restore issued on another stream (the
// legacy default stream, as cudaMemcpy did) would land before the poison.
TEST(CudaSession, RestoreIsOrderedAfterTheStreamsEarlierWork) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  const ModelConfig& c = w->cfg;
  cuda::CudaBackend be(w);
  const auto P = ids_from(10, 1, c.vocab), R = ids_from(4, 2, c.vocab);
  std::vector<float> want, got, scratch;
  {
    auto s = be.new_sequence();
    be.forward(*s, P, Logits::last, scratch);
    be.forward(*s, R, Logits::last, want);
  }
  auto s = be.new_sequence();
  auto& cs = dynamic_cast<cuda::CudaSequence&>(*s);
  be.forward(*s, P, Logits::last, scratch);
  const auto st = be.save(*s);
  const size_t nS = size_t(c.lin_v_heads) * cuda::kGdnDim * cuda::kGdnDim;
  for (float* S : cs.S) {
    if (S != nullptr) {
      ASSERT_EQ(delay_fill(S, nS, NAN, 50'000'000, cuda::CudaBench(be).stream()), cudaSuccess);
    }
  }
  be.restore(*s, *st);
  be.forward(*s, R, Logits::last, got);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tern::test
