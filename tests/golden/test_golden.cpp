// The CPU backend against Hugging Face transformers (tests/data/golden, made by
// tools/reference/make_golden.py): a tiny random Qwen3.5-MoE with the real head
// dims, written by transformers in the official HF layout and in the MLX 4-bit
// layout, with float32 logits for the bf16 weights and the dequantised 4-bit
// weights. Prefill at once, in chunks of 1, 7 and 64, and decode after prefill.
// The fast CPU backend runs the same: with fp32 activations at the same bound,
// with int8 activations (its default) at the bound of tests/fast_bound.h.
//
// Tolerance: both sides compute in fp32 from identical weight values (the
// quantiser is bit-exact with the reference), so the only differences are
// fp32 summation orders: observed max |diff| ~2e-5 with max |logit| ~15. The
// bound 1e-4 x max|logit| is 10x tighter than the 1e-3 and still
// leaves an order of magnitude of margin; top-1 must agree everywhere.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/fast_backend.h"
#include "backends/reference/reference_backend.h"
#include "core/npy.h"
#include "engine/score.h"
#include "fast_bound.h"
#include "test_util.h"

namespace tern {

namespace {

const std::string kGolden = std::string(TERN_SOURCE_DIR) + "/tests/data/golden";

std::vector<std::vector<int32_t>> golden_tokens() {
  std::ifstream in(kGolden + "/tokens.json");
  return nlohmann::json::parse(in).get<std::vector<std::vector<int32_t>>>();
}

void expect_matches(const std::vector<float>& ours, const NpyArray& ref,
                    const std::vector<int32_t>& tokens, const std::string& what) {
  ASSERT_EQ(ours.size(), ref.data.size()) << what;
  ScoreReport r = compare_logits(ours.data(), ref.data.data(), int64_t(ref.shape[0]),
                                 int64_t(ref.shape[1]), tokens);
  EXPECT_EQ(r.top1_agreement, 1.0) << what;
  EXPECT_LE(r.max_abs_diff, 1e-4 * test::max_abs(ref.data)) << what;
}

// Logits of `tokens` after prefilling the first `prefill` at once and then
// decoding the rest one token at a time (the generation path).
std::vector<float> prefill_then_decode(Backend& b, const std::vector<int32_t>& tokens,
                                       size_t prefill) {
  const size_t V = size_t(b.config().vocab);
  std::vector<float> all, part;
  auto seq = b.new_sequence();
  b.forward(*seq, std::span(tokens).first(prefill), Logits::all, all);
  for (size_t i = prefill; i < tokens.size(); ++i) {
    b.forward(*seq, std::span(tokens).subspan(i, 1), Logits::last, part);
    EXPECT_EQ(part.size(), V);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

struct Case {
  const char* dir;
  WeightMode mode;
  const char* logits;
};

}  // namespace

class Golden : public testing::TestWithParam<Case> {};

// Every golden sequence through `b` at once, in chunks and as decode after a
// prefill of half, each result checked by check(ours, reference, tokens, what).
template <class Check>
void for_each_run(Backend& b, const Case& c, const Check& check) {
  auto seqs = golden_tokens();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& toks = seqs[s];
    NpyArray ref = read_npy_f32(kGolden + "/" + c.logits + "_" + std::to_string(s) + ".npy");
    const std::string what = b.name() + " " + c.dir + " seq " + std::to_string(s);
    for (int64_t chunk : {0, 1, 7, 64})
      check(score_tokens(b, toks, chunk), ref, toks, what + " chunk " + std::to_string(chunk));
    check(prefill_then_decode(b, toks, toks.size() / 2), ref, toks, what + " decode after prefill");
  }
}

TEST_P(Golden, MatchesTransformers) {
  const Case c = GetParam();
  ReferenceBackend backend(load_model(kGolden + "/" + c.dir, c.mode));
  for_each_run(backend, c, expect_matches);
}

TEST_P(Golden, FastBackendMatchesTransformers) {
  const Case c = GetParam();
  auto w = load_model(kGolden + "/" + c.dir, c.mode);
  for (cpu::Isa isa : cpu::supported_isas()) {
    FastCpuBackend exact(w, isa, false);
    for_each_run(exact, c, expect_matches);
    FastCpuBackend fast(w, isa);
    for_each_run(fast, c,
                 [&](const std::vector<float>& ours, const NpyArray& ref,
                     const std::vector<int32_t>& toks, const std::string& what) {
                   test::expect_within_int8_bound(ours, ref.data, toks, w->cfg.vocab,
                                                  what + " " + cpu::isa_name(isa));
                 });
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Golden,
                         testing::Values(Case{"hf", WeightMode::bf16, "logits_bf16"},
                                         Case{"hf", WeightMode::q4, "logits_q4"},
                                         Case{"mlx4", WeightMode::q4, "logits_q4"}),
                         [](const auto& p) {
                           return std::string(p.param.dir) +
                                  (p.param.mode == WeightMode::q4 ? "_q4" : "_bf16");
                         });

TEST(Golden, RecurrentAndChunkedFormsAgree) {
  auto w = load_model(kGolden + "/hf", WeightMode::bf16);
  auto toks = golden_tokens()[2];
  NpyArray ref = read_npy_f32(kGolden + "/logits_bf16_2.npy");
  for (model::DeltaForm f : {model::DeltaForm::recurrent, model::DeltaForm::chunked}) {
    ReferenceBackend b(w, f);
    expect_matches(score_tokens(b, toks, 0), ref, toks, "forced delta-rule form");
  }
}

}  // namespace tern
