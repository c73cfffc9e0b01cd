// The fast CPU backend end to end on tiny random checkpoints, for every
// instruction set this CPU runs: with fp32 activations it is the reference's
// function (its structure: fused MoE, blocked attention, chunked delta rule,
// chunked prompts); with int8 activations (the default) it stays within the
// bound below; prefill at once, in chunks or token by token agree; greedy
// decoding follows the reference; decode allocates nothing per token.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "backend/sampler.h"
#include "backend_checks.h"
#include "backends/cpu/context.h"
#include "backends/cpu/fast_backend.h"
#include "backends/cpu/moe_layer.h"
#include "backends/cpu/pack16.h"
#include "backends/factory.h"
#include "core/error.h"
#include "engine/score.h"
#include "fast_bound.h"
#include "test_util.h"

// Counts heap allocations while armed (operator new and delete replaced for
// this binary, on malloc and free; GCC cannot see that they pair up).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace tern {

using cpu::Isa;

namespace {

std::string isa_label(const testing::TestParamInfo<Isa>& p) {
  return cpu::isa_name(p.param);
}

}  // namespace

class FastBackend : public testing::TestWithParam<Isa> {
 protected:
  static std::shared_ptr<const ModelWeights> tiny() {
    static auto w = load_model(test::tiny_checkpoint(Layout::mlx4, 7), WeightMode::q4);
    return w;
  }
};

// fp32 activations: the reference's arithmetic, so its bound (1e-4 x
// max|logit|, the golden tests'): a 600-token prompt at once (split at 512
// inside, the chunked delta rule from 64 tokens), and 150 tokens in chunks.
TEST_P(FastBackend, WithFp32ActivationsIsTheReferenceFunction) {
  ReferenceBackend ref(tiny());
  FastCpuBackend fast(tiny(), GetParam(), false);
  const auto long_prompt = test::random_tokens(600, tiny()->cfg.vocab, 3);
  const std::vector<float> want = score_tokens(ref, long_prompt, 0);
  EXPECT_LE(test::max_abs_diff(score_tokens(fast, long_prompt, 0), want),
            1e-4f * test::max_abs(want));
  const auto toks = std::span(long_prompt).first(150);
  const std::vector<float> want150(want.begin(), want.begin() + 150 * tiny()->cfg.vocab);
  for (int64_t chunk : {1, 7, 64, 100})
    EXPECT_LE(test::max_abs_diff(score_tokens(fast, toks, chunk), want150),
              1e-4f * test::max_abs(want150))
        << chunk;
}

TEST_P(FastBackend, WithInt8ActivationsStaysWithinTheBound) {
  ReferenceBackend ref(tiny());
  FastCpuBackend fast(tiny(), GetParam());
  const auto toks = test::random_tokens(150, tiny()->cfg.vocab, 4);
  const std::vector<float> want = score_tokens(ref, toks, 0), got = score_tokens(fast, toks, 0);
  test::expect_within_int8_bound(got, want, toks, tiny()->cfg.vocab, "fast vs reference");
  EXPECT_GT(test::max_abs_diff(got, want), 1e-3f * test::max_abs(want));  // int8 was taken
}

// Chunks change which rows share a kernel call, not the arithmetic of a row,
// but an input a rounding away from a code's boundary can round either way:
// the chunkings agree within the same bound.
TEST_P(FastBackend, PrefillAtOnceInChunksAndTokenByTokenAgree) {
  FastCpuBackend fast(tiny(), GetParam());
  const auto toks = test::random_tokens(150, tiny()->cfg.vocab, 5);
  const std::vector<float> whole = score_tokens(fast, toks, 0);
  for (int64_t chunk : {1, 7, 64, 100})
    test::expect_within_int8_bound(score_tokens(fast, toks, chunk), whole, toks, tiny()->cfg.vocab,
                                   "chunk " + std::to_string(chunk));
}

namespace {

// 128 greedy tokens after a prompt, and the logits each was chosen from.
std::vector<int32_t> greedy(Backend& b, std::vector<std::vector<float>>* logits_seen = nullptr) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35};
  auto s = b.new_sequence();
  std::vector<float> logits;
  b.forward(*s, prompt, Logits::last, logits);
  std::vector<int32_t> out;
  for (int i = 0; i < 128; ++i) {
    if (logits_seen) logits_seen->push_back(logits);
    out.push_back(argmax(logits));
    b.forward(*s, std::span(&out.back(), 1), Logits::last, logits);
  }
  return out;
}

// got equals want up to the first step where want's best two were within the
// int8 bound of each other (want_logits: the logits each was chosen from).
void expect_follows(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                    const std::vector<std::vector<float>>& want_logits) {
  const size_t i = size_t(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
  if (i == got.size()) return;
  const std::vector<float>& l = want_logits[i];
  EXPECT_LE(l[size_t(want[i])] - l[size_t(got[i])], test::Int8Bound::max_diff * test::max_abs(l))
      << "departed at step " << i;
}

}  // namespace

// With fp32 activations: the reference's 128 greedy tokens exactly. With
// int8: the same tokens up to the first step where the reference's best two
// are within the int8 bound of each other (a near-tie on this random dummy,
// typically after ~10 tokens); the step it departs at must be one.
TEST_P(FastBackend, GreedyDecodingFollowsTheReference) {
  ReferenceBackend ref(tiny());
  std::vector<std::vector<float>> ref_logits;
  const std::vector<int32_t> want = greedy(ref, &ref_logits);
  FastCpuBackend exact(tiny(), GetParam(), false);
  EXPECT_EQ(greedy(exact), want);
  FastCpuBackend fast(tiny(), GetParam());
  expect_follows(greedy(fast), want, ref_logits);
}

TEST_P(FastBackend, DecodeAllocatesNothingPerToken) {
  FastCpuBackend fast(tiny(), GetParam());
  auto s = fast.new_sequence();
  std::vector<float> logits;
  const auto toks = test::random_tokens(40, tiny()->cfg.vocab, 6);
  fast.forward(*s, toks, Logits::last, logits);
  int32_t next = 1;
  // Warm up: the first steps size the buffers; the KV cache then holds 80 positions.
  for (int i = 0; i < 2; ++i) fast.forward(*s, std::span(&next, 1), Logits::last, logits);
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 30; ++i) fast.forward(*s, std::span(&next, 1), Logits::last, logits);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

// Decode steps over several sequences (Backend::step): each row as alone.
TEST_P(FastBackend, SequencesSteppedTogetherDecodeAsAlone) {
  FastCpuBackend fast(tiny(), GetParam());
  test::check_step_equals_alone(fast);
}

INSTANTIATE_TEST_SUITE_P(Isas, FastBackend, testing::ValuesIn(cpu::supported_isas()), isa_label);

// Weights repacked (pack16.h) after a read into memory, the bytes they came
// from given back: the tables that take the layout compute the same integer
// sums in another fp32 order (each matmul and MoE layer within ~1e-6 of the
// plain layout's), but an input a rounding away from an int8 code's boundary
// can then round the other way, and on this dummy that moves later logits by
// up to 4% of max|logit|: the int8 bound against the plain layout, greedy
// tokens the same up to a near-tie. The fp32 path (no int8 codes) refuses them.
TEST_P(FastBackend, RepackedWeightsServeTheSameModel) {
  auto packed =
      load_model(test::tiny_checkpoint(Layout::mlx4, 7), WeightMode::q4, Residency::huge_pages);
  const size_t bytes = cpu::pack_weights(*packed);
  ASSERT_TRUE(cpu::has_packed(*packed));
  EXPECT_TRUE(packed->lm_head.packed16);
  EXPECT_TRUE(packed->layers[3].attn.o.packed16);      // 1024 inputs: whole 4-group blocks
  EXPECT_TRUE(packed->layers[0].moe.router.packed16);  // 8-bit
  // Every matrix but the shared expert's gate (1 row) and the GDN decay and
  // beta projections (4 rows here, 32 in the 35b-a3b).
  size_t want_bytes = packed->lm_head.bytes();
  for (const LayerWeights& L : packed->layers)
    LayerWeights::for_each_matrix(L, [&](const QTensor& t) {
      if (t.packed16)
        want_bytes += t.bytes();
      else
        EXPECT_TRUE(&t == &L.moe.shared_expert_gate || &t == &L.gdn.in_a || &t == &L.gdn.in_b);
    });
  EXPECT_EQ(bytes, want_bytes);
  EXPECT_THROW(FastCpuBackend(packed, GetParam(), false), Error);
  // One MoE layer (gathered rows, scaled and accumulated outputs) on the same
  // quantised inputs and routes (the plain router: the packed one takes int8
  // codes, which may break a near-tie the other way): the plain layout's
  // outputs within fp32 rounding.
  cpu::Context ctx{ThreadPool::global(), cpu::kernels(GetParam()), true, {}};
  const int64_t T = 150, D = tiny()->cfg.hidden;
  const std::vector<float> x = test::random_vector(size_t(T * D), 9);
  cpu::Activations act;
  act.set(ctx.pool, ctx.k, x.data(), D, T, D, true);
  for (size_t i = 0; i < packed->layers.size(); ++i) {
    cpu::MoeLayer m;
    std::vector<float> want(size_t(T * D)), got(size_t(T * D));
    m.forward(ctx, tiny()->cfg, tiny()->layers[i].moe, act, T, want.data());
    MoeWeights experts_packed = packed->layers[i].moe;
    experts_packed.router = tiny()->layers[i].moe.router;
    m.forward(ctx, tiny()->cfg, experts_packed, act, T, got.data());
    EXPECT_LE(test::max_abs_diff(got, want), 1e-5f * test::max_abs(want)) << "layer " << i;
  }
  FastCpuBackend plain(tiny(), GetParam()), fast(packed, GetParam());
  const auto toks = test::random_tokens(150, tiny()->cfg.vocab, 8);
  test::expect_within_int8_bound(score_tokens(fast, toks, 0), score_tokens(plain, toks, 0), toks,
                                 tiny()->cfg.vocab, "repacked vs plain");
  std::vector<std::vector<float>> plain_logits;
  const std::vector<int32_t> want = greedy(plain, &plain_logits);
  expect_follows(greedy(fast), want, plain_logits);
}

TEST(FastBackend, IsTheDefaultCpuBackend) {
  auto w = load_model(test::tiny_checkpoint(Layout::mlx4, 7), WeightMode::q4);
  EXPECT_EQ(make_backend("cpu", w)->name(), "cpu");
  EXPECT_NE(dynamic_cast<FastCpuBackend*>(make_backend("cpu", w).get()), nullptr);
  EXPECT_EQ(make_backend("cpu-ref", w)->name(), "cpu-ref");
  EXPECT_EQ(dynamic_cast<FastCpuBackend*>(make_backend("cpu-ref", w).get()), nullptr);
}

}  // namespace tern
