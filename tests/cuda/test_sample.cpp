// The CUDA sampler (sample.cu) against its CPU twin (sample_token): equal ids
// on fresh random logits (std 3) over many params, seeds and vocabularies up
// to the real 248,320, ties included. The twins share their fixed-point
// arithmetic; only the last bit of exp may differ, which moves a choice only
// within ~2^-40 of a boundary, so any mismatch here is a bug. Then graph
// replays (self-resetting state, counts incremented).
#include <cmath>
#include <random>

#include "backend/sampler.h"
#include "backends/cuda/cuda_sequence.h"
#include "backends/cuda/sample.h"
#include "gpu_test_util.h"
#include "sampling_cases.h"

namespace tern::test {
namespace {

constexpr int kRing = 16;

// One device sampler: its inputs, scratch, the step's scalars as a sequence
// holds them and id ring.
struct DeviceSampler {
  int n;
  DevPtr<float> logits;
  DevPtr<int> counts, out;
  DevPtr<cuda::StepScalars> scalars;
  DevPtr<SampleRules> rules;
  DevPtr<uint8_t> scratch;

  explicit DeviceSampler(int vocab)
      : n(vocab),
        logits(to_dev(std::vector<float>(size_t(vocab)))),
        counts(to_dev(std::vector<int>(size_t(vocab)))),
        out(to_dev(std::vector<int>(kRing, -1))),
        scalars(to_dev(std::vector<cuda::StepScalars>(1, cuda::StepScalars{}))),
        rules(to_dev(std::vector<SampleRules>(1))),
        scratch(to_dev(std::vector<uint8_t>(cuda::sample_scratch_bytes(vocab), 0))) {}

  cuda::SampleArgs args() const {
    cuda::StepScalars* d = scalars.get();
    return {logits.get(), n,         rules.get(), counts.get(), scratch.get(),
            &d->token,    out.get(), kRing - 1,   &d->step,     &d->pos};
  }
  void upload(const std::vector<float>& l, const std::vector<int32_t>& c, const SamplingParams& p,
              int step) {
    const SampleRules r = sample_rules(p);
    ASSERT_EQ(cudaMemcpy(logits.get(), l.data(), l.size() * 4, cudaMemcpyHostToDevice), 0);
    ASSERT_EQ(cudaMemcpy(counts.get(), c.data(), c.size() * 4, cudaMemcpyHostToDevice), 0);
    ASSERT_EQ(cudaMemcpy(rules.get(), &r, sizeof(r), cudaMemcpyHostToDevice), 0);
    ASSERT_EQ(cudaMemcpy(&scalars.get()->step, &step, 4, cudaMemcpyHostToDevice), 0);
  }
};

// Each choice also advances step and pos, fills the ring and counts the token.
void expect_choice(DeviceSampler& d, const SampleCase& c, const char* what, int i) {
  const auto counts = counts_of(c.history, c.logits.size());
  const int step = int(c.step);
  d.upload(c.logits, counts, c.p, step);
  const int pos0 = to_host(d.scalars.get(), 1)[0].pos;
  ASSERT_EQ(cuda::sample_advance(d.args(), nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const int32_t want = sample_token(c.logits, counts, c.p, c.step);
  const cuda::StepScalars got = to_host(d.scalars.get(), 1)[0];
  ASSERT_EQ(got.token, want) << what << " case " << i << ": T " << c.p.temperature << " top_k "
                             << c.p.top_k << " top_p " << c.p.top_p << " min_p " << c.p.min_p;
  EXPECT_EQ(got.pos, pos0 + 1);
  EXPECT_EQ(got.step, step + 1);
  EXPECT_EQ(to_host(d.out.get() + (step & (kRing - 1)), 1)[0], want);
  EXPECT_EQ(to_host(d.counts.get() + want, 1)[0], counts[size_t(want)] + 1);
}

class SampleVocab : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(SampleVocab, KernelMatchesCpuTwin) {
  TERN_REQUIRE_GPU();
  const auto [V, cases] = GetParam();
  DeviceSampler d(V);  // one scratch for every case: the state resets itself
  std::mt19937 g{uint32_t(V)};
  for (int i = 0; i < cases; ++i) expect_choice(d, random_case(g, size_t(V)), "random", i);
  for (int i = 0; i < cases / 2; ++i) expect_choice(d, random_case(g, size_t(V), 0.25f), "ties", i);
}

INSTANTIATE_TEST_SUITE_P(Vocab, SampleVocab,
                         ::testing::Values(std::pair{1000, 400}, std::pair{2053, 300},
                                           std::pair{65536, 100}, std::pair{248320, 60}));

// n random cases over the real vocabulary, each edited before the check;
// `then` checks more of the device's choice.
template <typename Edit, typename Then>
void check_edited(uint32_t seed, int n, const char* what, Edit edit, Then then) {
  constexpr int V = 248320;
  DeviceSampler d(V);
  std::mt19937 g(seed);
  for (int i = 0; i < n; ++i) {
    SampleCase c = random_case(g, V);
    edit(c, i);
    expect_choice(d, c, what, i);
    then(d, c);
  }
}

TEST(CudaSampler, TopKOneIsArgmax) {
  TERN_REQUIRE_GPU();
  check_edited(
      3, 10, "top_k 1",
      [](SampleCase& c, int) {
        c.history.clear();
        c.p.top_k = 1;
        c.p.temperature = 1.0f;
      },
      [](const DeviceSampler& d, const SampleCase& c) {
        EXPECT_EQ(to_host(d.scalars.get(), 1)[0].token, argmax(c.logits));
      });
}

// A top-k whose bound ties with more tokens than one block gathers falls
// back to the radix selects: a plateau of about 3,000 equal best logits, then
// smaller ones, with top-k 40 (gathered from the blocks' best keys, all on
// the plateau) and the other rules on.
TEST(CudaSampler, TopKPlateauBeyondTheGatherFallsBack) {
  TERN_REQUIRE_GPU();
  check_edited(
      5, 6, "plateau",
      [](SampleCase& c, int i) {
        for (size_t t = 0; t < c.logits.size(); ++t)
          c.logits[t] = t % 83 == 0 ? 20.0f : -std::abs(c.logits[t]);
        c.p.temperature = 0.5f + 0.2f * float(i);
        c.p.top_k = 40;
        c.p.top_p = i % 2 ? 0.9f : 1.0f;
        c.p.min_p = i % 3 ? 0.05f : 0.0f;
        c.step = uint64_t(i);
      },
      [](const DeviceSampler&, const SampleCase&) {});
}

// A captured graph replayed 64 times chooses what the CPU Sampler chooses
// step after step, each choice counted for the penalties of the next.
TEST(CudaSampler, GraphReplaysFollowTheCpuSampler) {
  TERN_REQUIRE_GPU();
  constexpr int V = 5000, kSteps = 64;
  DeviceSampler d(V);
  std::mt19937 g(4);
  SampleCase c = random_case(g, V);
  c.p.temperature = 0.7f;
  c.p.top_k = 50;
  c.p.top_p = 0.9f;
  c.p.min_p = 0.01f;
  c.p.repetition_penalty = 1.3f;
  c.p.frequency_penalty = 0.4f;
  for (float& x : c.logits) x *= 0.3f;  // flat enough that the penalties matter
  d.upload(c.logits, counts_of(c.history, V), c.p, 0);
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cuda::sample_advance(d.args(), st), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  Sampler cpu(c.p, V);
  for (int32_t t : c.history) cpu.count(t);
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    const int32_t want = cpu.next(c.logits);
    ASSERT_EQ(to_host(d.scalars.get(), 1)[0].token, want) << "step " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace tern::test
