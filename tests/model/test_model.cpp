// Whole-model properties on tiny random checkpoints: every checkpoint variant
// loads to the same function, convert round-trips, dummies are deterministic and
// well-scaled, and prefill in any chunking gives the same logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

#include "backends/reference/reference_backend.h"
#include "checkpoint/convert.h"
#include "checkpoint/safetensors_writer.h"
#include "engine/score.h"
#include "test_util.h"

namespace tern {

namespace fs = std::filesystem;

namespace {

std::vector<float> logits_of(const std::string& dir, WeightMode mode, const std::vector<int32_t>& t,
                             int64_t chunk = 0) {
  ReferenceBackend b(load_model(dir, mode));
  return score_tokens(b, t, chunk);
}

// Rewrites a Hugging Face checkpoint with per-expert tensors and the text-only
// "model." prefix, as third-party re-exports do.
std::string per_expert_variant(const std::string& src) {
  const std::string dst = test::scratch_dir("per_expert");
  fs::copy_file(fs::path(src) / "config.json", fs::path(dst) / "config.json");
  auto store = std::make_shared<TensorStore>(src);
  ModelConfig c = load_config(src + "/config.json");
  std::vector<PlannedTensor> out;
  const size_t I = size_t(c.moe_inter), D = size_t(c.hidden);
  for (const std::string& n : store->names()) {
    const TensorView& v = store->get(n);
    std::string name = n;
    if (name.starts_with("model.language_model."))
      name = "model." + name.substr(std::string("model.language_model.").size());
    const size_t at = name.find("mlp.experts.");
    if (at == std::string::npos) {
      out.push_back(
          {name, v.dtype, v.shape, [&v, store](uint8_t* d) { std::memcpy(d, v.data, v.nbytes); }});
      continue;
    }
    const std::string p = name.substr(0, at) + "mlp.experts.";
    const bool gate_up = name.ends_with("gate_up_proj");
    for (int e = 0; e < c.n_experts; ++e) {
      const std::string q = p + std::to_string(e) + ".";
      if (gate_up) {
        for (int part = 0; part < 2; ++part)
          out.push_back({q + (part ? "up_proj.weight" : "gate_proj.weight"),
                         v.dtype,
                         {int64_t(I), int64_t(D)},
                         [&v, store, e, part, I, D](uint8_t* d) {
                           std::memcpy(d, v.data + (size_t(e) * 2 * I + part * I) * D * 2,
                                       I * D * 2);
                         }});
      } else {
        out.push_back({q + "down_proj.weight",
                       v.dtype,
                       {int64_t(D), int64_t(I)},
                       [&v, store, e, I, D](uint8_t* d) {
                         std::memcpy(d, v.data + size_t(e) * D * I * 2, D * I * 2);
                       }});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  write_safetensors(dst, std::move(out), size_t(1) << 40);
  return dst;
}

}  // namespace

TEST(Model, PrefillChunkingAndDecodeGiveTheSameLogits) {
  const std::string dir = test::tiny_checkpoint(Layout::mlx4);
  auto w = load_model(dir, WeightMode::q4);
  ReferenceBackend b(w);
  auto toks = test::random_tokens(150, w->cfg.vocab, 3);
  std::vector<float> whole = score_tokens(b, toks, 0);
  const float bound = 1e-4f * test::max_abs(whole);
  for (int64_t chunk : {1, 7, 64, 100})
    EXPECT_LE(test::max_abs_diff(score_tokens(b, toks, chunk), whole), bound) << chunk;
}

// The checkpoint read into 2 MB pages holds the mapped one's bytes, and the
// model on it gives the same logits. Where this machine has transparent huge
// pages on, the store must not have fallen back to mapping.
TEST(Model, HugePageResidencyHoldsTheSameCheckpoint) {
  const std::string dir = test::tiny_checkpoint(Layout::mlx4, 8);
  TensorStore mapped(dir), huge(dir, Residency::huge_pages);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string mode((std::istreambuf_iterator<char>(thp)), {});
  if (!mode.empty() && mode.find("[never]") == std::string::npos) {
    EXPECT_EQ(huge.residency(), Residency::huge_pages) << mode;
  }
  ASSERT_EQ(huge.names(), mapped.names());
  for (const std::string& n : mapped.names()) {
    const TensorView &a = mapped.get(n), &b = huge.get(n);
    ASSERT_EQ(a.shape, b.shape) << n;
    ASSERT_EQ(a.nbytes, b.nbytes) << n;
    EXPECT_NE(a.data, b.data) << n;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << n;
  }
  auto toks = test::random_tokens(30, 1024, 2);
  ReferenceBackend on_pages(load_model(dir, WeightMode::q4, Residency::huge_pages));
  EXPECT_EQ(score_tokens(on_pages, toks, 0), logits_of(dir, WeightMode::q4, toks));
}

TEST(Model, DummyIsDeterministicAndWellScaled) {
  const std::string a = test::tiny_checkpoint(Layout::mlx4, 5);
  const std::string b = test::scratch_dir("again");
  DummyOptions o;
  o.layout = Layout::mlx4;
  o.seed = 5;
  o.out_dir = b;
  make_dummy(o);
  std::ifstream fa(a + "/model.safetensors", std::ios::binary),
      fb(b + "/model.safetensors", std::ios::binary);
  EXPECT_TRUE(
      std::equal(std::istreambuf_iterator<char>(fa), {}, std::istreambuf_iterator<char>(fb)));
  auto toks = test::random_tokens(40, 1024, 9);
  std::vector<float> l = logits_of(a, WeightMode::q4, toks);
  double mean = 0, var = 0;
  for (float x : l) mean += x;
  mean /= double(l.size());
  for (float x : l) var += (x - mean) * (x - mean);
  const double sd = std::sqrt(var / double(l.size()));
  EXPECT_GT(sd, 1.5) << "logits are flat";
  EXPECT_LT(sd, 20.0);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
  // Another seed is another model.
  EXPECT_GT(test::max_abs_diff(
                logits_of(test::tiny_checkpoint(Layout::mlx4, 6), WeightMode::q4, toks), l),
            1.0f);
}

TEST(Model, HfVariantsLoadToTheSameFunction) {
  const std::string hf = test::tiny_checkpoint(Layout::hf);
  auto toks = test::random_tokens(20, 1024, 4);
  std::vector<float> ref = logits_of(hf, WeightMode::bf16, toks);
  EXPECT_EQ(logits_of(per_expert_variant(hf), WeightMode::bf16, toks), ref);
}

TEST(Model, ConvertRoundTripsAndMatchesQuantisingAtLoad) {
  const std::string hf = test::tiny_checkpoint(Layout::hf);
  const std::string out = test::scratch_dir("converted");
  convert_checkpoint(hf, out);
  auto w = load_model(out, WeightMode::q4);
  EXPECT_EQ(w->layout, "mlx");
  auto toks = test::random_tokens(30, 1024, 6);
  std::vector<float> at_load = logits_of(hf, WeightMode::q4, toks);
  std::vector<float> converted = logits_of(out, WeightMode::q4, toks);
  // Identical codes, scales and biases; the dummy's norm multipliers are exact
  // in bf16, so the MLX file's 1 + w loses nothing either.
  EXPECT_EQ(converted, at_load);
  // Same quantised matrices bit for bit.
  auto a = load_model(hf, WeightMode::q4);
  const QTensor &x = a->layers[3].attn.q, &y = w->layers[3].attn.q;
  EXPECT_EQ(std::memcmp(x.data, y.data, x.row_bytes() * size_t(x.rows)), 0);
  EXPECT_EQ(std::memcmp(x.scales, y.scales, size_t(x.rows) * x.groups_per_row() * 2), 0);
  EXPECT_EQ(a->layers[0].moe.router.bits, 8);
  EXPECT_EQ(w->layers[0].moe.router.bits, 8);
  EXPECT_EQ(w->layers[0].moe.gate[3].bits, 4);
}

TEST(Model, DummyWithTokenizerCoversItsVocabulary) {
  const std::string tok = TERN_QWEN3_TOKENIZER;
  const std::string out = test::scratch_dir("with_tokenizer");
  DummyOptions o;
  o.out_dir = out;
  o.tokenizer_dir = tok;
  make_dummy(o);
  EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(out + "/tokenizer_config.json"));
  auto w = load_model(out, WeightMode::q4);
  EXPECT_EQ(w->cfg.vocab, 151680);  // 151669 ids, padded to a multiple of 64
  EXPECT_EQ(w->cfg.hidden, 128);
}

TEST(Model, OutOfRangeTokenIsAnError) {
  ReferenceBackend b(load_model(test::tiny_checkpoint(Layout::mlx4), WeightMode::q4));
  auto seq = b.new_sequence();
  std::vector<float> l;
  std::vector<int32_t> bad = {1, 5000};
  EXPECT_THROW(b.forward(*seq, bad, Logits::last, l), Error);
}

}  // namespace tern
