// The CUDA prefill end to end (prefill.cpp): one prompt at real widths ("mid"
// preset) prefilled at once, in chunks and calls cut as the engine's prefill
// stops cut them, token by token (the decode step graph), with the GDN scan
// instead of the chunked form and with other tiles, each against
// the CPU and against each other; greedy decoding after a long prefill equal
// to the CPU's; chunk temporaries reused.
//
// Bound: 1e-3 * max|logit|, the CUDA backend's golden bar. The prefill GEMMs
// round weights and activations to fp16 (~2e-4 relative per product sum), the
// chunked delta rule its operands to tf32, attention q and its probabilities
// to bf16; the decode step is fp32-grade. Each path lands within ~1e-4..5e-4 of
// the CPU's largest logit, so two paths differ by at most the sum.
#include <gtest/gtest.h>

#include <random>

#include "backend/sampler.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_bench.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& where) {
  const float bound = 1e-3f * max_abs(want), d = max_diff(got, want);
  std::printf("[measured] %s: max|diff| %.3g = %.2e of max|logit|\n", where.c_str(), d,
              double(d / max_abs(want)));
  EXPECT_LE(d, bound) << where;
}

std::vector<int32_t> random_prompt(int n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = int32_t(g() % uint32_t(vocab));
  return p;
}

TEST(CudaPrefill, AtOnceInChunksAndTokenByTokenMatchTheCpu) {
  TERN_REQUIRE_GPU();
  const auto w = dummy_weights("mid");
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const auto prompt = random_prompt(300, w->cfg.vocab, 41);
  std::vector<float> want;
  {
    auto s = cpu.new_sequence();
    cpu.forward(*s, std::span(prompt).first(20), Logits::last, want);  // a cached prefix
    cpu.forward(*s, std::span(prompt).subspan(20), Logits::last, want);
  }
  // The prompt by options o in forward() calls that end at each of `stops`
  // (as the engine's prefill stops cut it), after the cached prefix.
  auto run = [&](const cuda::PrefillOptions& o, std::vector<int64_t> stops) {
    gpu.set_prefill_options(o);
    auto s = gpu.new_sequence();
    std::vector<float> logits;
    stops.insert(stops.begin(), 20);
    stops.push_back(int64_t(prompt.size()));
    int64_t at = 0;
    for (const int64_t stop : stops) {
      gpu.forward(*s, std::span(prompt).subspan(size_t(at), size_t(stop - at)), Logits::last,
                  logits);
      at = stop;
    }
    EXPECT_EQ(s->length(), int64_t(prompt.size()));
    return logits;
  };
  const auto at_once = run({}, {});
  expect_close(at_once, want, "at once");
  EXPECT_EQ(argmax(at_once), argmax(want));
  cuda::PrefillOptions chunks;
  chunks.chunk = 64;
  expect_close(run(chunks, {100, 250}), want, "chunks of 64, calls ending at 100 and 250");
  cuda::PrefillOptions scan;
  scan.chunked_from = 1 << 30;
  expect_close(run(scan, {}), want, "GDN scan");
  cuda::PrefillOptions steps;
  steps.step_below = 1 << 30;
  const auto by_token = run(steps, {});
  expect_close(by_token, want, "token by token");
  EXPECT_LE(max_diff(at_once, by_token), 1e-3f * max_abs(want)) << "at once vs token by token";
  struct Tiles {
    int moe_bn, dense_bn, bm;
  };
  for (const Tiles& t : {Tiles{64, 64, 128}, Tiles{128, 128, 128}, Tiles{128, 128, 256},
                         Tiles{96, 64, 128}, Tiles{48, 32, 128}}) {
    cuda::PrefillOptions tiles;
    tiles.moe_bn = t.moe_bn, tiles.dense_bn = t.dense_bn, tiles.gemm_bm = t.bm, tiles.moe_bm = t.bm;
    expect_close(run(tiles, {}), want,
                 "tiles of " + std::to_string(t.bm) + " x " + std::to_string(t.moe_bn) +
                     " (MoE), x " + std::to_string(t.dense_bn) + " (dense)");
  }
}

TEST(CudaPrefill, Greedy256AfterALongPrefillEqualsCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const auto prompt = random_prompt(300, w->cfg.vocab, 7);
  constexpr int kN = 256;
  const std::vector<int32_t> want = greedy_by_forward(cpu, prompt, kN);
  // The engine's flow: the prompt but its last token, then generate() from it.
  auto s = gpu.new_sequence();
  std::vector<float> logits;
  gpu.forward(*s, std::span(prompt).first(prompt.size() - 1), Logits::last, logits);
  gpu.start_sampling(*s, SamplingParams{}, prompt);
  std::vector<int32_t> got;
  gpu.generate(*s, prompt.back(), kN, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  EXPECT_EQ(got, want);
}

TEST(CudaPrefill, AllLogitsMatchTheCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const auto prompt = random_prompt(600, w->cfg.vocab, 9);  // past one 256-row logits piece
  std::vector<float> want, got;
  cpu.forward(*cpu.new_sequence(), prompt, Logits::all, want);
  cuda::PrefillOptions o;
  o.chunk = 250;
  gpu.set_prefill_options(o);
  gpu.forward(*gpu.new_sequence(), prompt, Logits::all, got);
  ASSERT_EQ(got.size(), want.size());
  expect_close(got, want, "all logits, chunks of 250");
}

TEST(CudaPrefill, ReusesItsTemporariesAndRefusesBadOptions) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  cuda::CudaBackend gpu(w);
  const auto prompt = random_prompt(500, w->cfg.vocab, 3);
  std::vector<float> logits;
  auto a = gpu.new_sequence(), b = gpu.new_sequence();
  gpu.forward(*a, prompt, Logits::last, logits);
  const size_t used = cuda::device_memory_used();
  gpu.forward(*b, prompt, Logits::last, logits);  // same chunk: nothing new
  EXPECT_EQ(cuda::device_memory_used(), used);
  // The backend checks its options (every case: test_prefill_tiles.cpp).
  EXPECT_THROW(gpu.set_prefill_options({.chunk = 0}), Error);
}

}  // namespace
}  // namespace tern::test
