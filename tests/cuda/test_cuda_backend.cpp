// End to end: the CUDA backend against the transformers golden logits (q4
// weights, both checkpoint layouts) with the foundation bars (top-1 100%,
// max|diff| <= 1e-3 * max|logit|: activations are fp32 on the GPU too, so the
// exact bars apply), and greedy and sampled generation equal on CPU and CUDA
// for a tiny random checkpoint.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/sampler.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_bench.h"
#include "backends/cuda/device_weights.h"
#include "backends/reference/reference_backend.h"
#include "checkpoint/config.h"
#include "checkpoint/dummy.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/score.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

const std::string kGolden = std::string(TERN_SOURCE_DIR) + "/tests/data/golden";

void check_golden(const std::string& dir) {
  auto w = load_model(dir, WeightMode::q4);
  cuda::CudaBackend be(w);
  std::ifstream f(kGolden + "/tokens.json");
  const auto seqs = nlohmann::json::parse(f);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto tokens = seqs[i].get<std::vector<int32_t>>();
    const auto logits = score_tokens(be, tokens, 0);
    const NpyArray ref = read_npy_f32(kGolden + "/logits_q4_" + std::to_string(i) + ".npy");
    const ScoreReport r = compare_logits(logits.data(), ref.data.data(), int64_t(tokens.size()),
                                         be.config().vocab, tokens);
    float mx = 0;
    for (float x : ref.data) mx = std::max(mx, std::abs(x));
    EXPECT_EQ(r.top1_agreement, 1.0) << dir << " sequence " << i;
    EXPECT_LE(r.max_abs_diff, 1e-3 * mx) << dir << " sequence " << i;
  }
}

TEST(CudaBackend, GoldenMlx4) {
  TERN_REQUIRE_GPU();
  check_golden(kGolden + "/mlx4");
}

TEST(CudaBackend, GoldenHfQuantisedAtLoad) {
  TERN_REQUIRE_GPU();
  check_golden(kGolden + "/hf");
}

TEST(CudaBackend, Greedy256EqualsCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const std::vector<int32_t> prompt = {1, 7, 42, 99, 3};
  constexpr int kN = 256;
  const std::vector<int32_t> want = greedy_by_forward(cpu, prompt, kN);
  auto s = gpu.new_sequence();
  std::vector<float> logits;
  gpu.forward(*s, prompt, Logits::last, logits);
  const int32_t first = argmax(logits);
  std::vector<int32_t> got = {first};
  gpu.start_sampling(*s, SamplingParams{}, std::span(&first, 1));
  gpu.generate(*s, first, kN - 1, [&](int32_t id) {
    got.push_back(id);
    return true;
  });
  EXPECT_EQ(got, want);
}

// The KV cache starts at 4,096 positions and grows by copying the chunks in
// use. Steps grow it at a whole chunk (4,096 positions), CudaBench::set_length
// (tern bench's fill) anywhere: here at 4,090, the last chunk partial. The old rows
// survive bit for bit, and the logits on either side of the growth match the
// CPU's.
TEST(CudaBackend, KvCacheGrowthKeepsTheContext) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  const ModelConfig& c = w->cfg;
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  std::mt19937 g(5);
  std::vector<int32_t> tokens(4100);
  for (int32_t& t : tokens) t = int32_t(g() % uint32_t(c.vocab));
  auto sc = cpu.new_sequence(), sg = gpu.new_sequence();
  auto& cs = dynamic_cast<cuda::CudaSequence&>(*sg);
  const int layer =
      int(std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::full_attention) -
          c.layer_types.begin());
  ASSERT_LT(layer, c.n_layers);
  constexpr int kOld = 4090, hd = cuda::kHeadDim;
  // Each KV head's first kOld positions, in the chunked layout (layout.h).
  auto old_rows = [&](const uint16_t* cache, bool v) {
    std::vector<uint16_t> rows;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const auto all = to_host(cache + size_t(h) * cs.capacity * hd, size_t(4096) * hd);
      for (int p = 0; p < kOld; ++p)
        for (int q = 0; q < hd / 8; ++q) {
          const size_t at = kv_chunked_at(size_t(p), q, v);
          rows.insert(rows.end(), &all[at], &all[at] + 8);
        }
    }
    return rows;
  };
  std::vector<uint16_t> k0, v0;
  std::vector<float> want, got;
  for (const auto& [from, to] : {std::pair{0, kOld}, std::pair{kOld, 4100}}) {
    const std::span<const int32_t> part(tokens.data() + from, size_t(to - from));
    cpu.forward(*sc, part, Logits::last, want);
    gpu.forward(*sg, part, Logits::last, got);
    float mx = 0;
    for (float x : want) mx = std::max(mx, std::abs(x));
    EXPECT_EQ(argmax(got), argmax(want)) << "after " << to << " tokens";
    EXPECT_LE(max_diff(got, want), 1e-3f * mx) << "after " << to << " tokens";
    if (from == 0) {
      ASSERT_EQ(cs.capacity, 4096);
      k0 = old_rows(cs.k[size_t(layer)], false), v0 = old_rows(cs.v[size_t(layer)], true);
      cuda::CudaBench(gpu).set_length(*sg, 5000);  // grows the cache
      cuda::CudaBench(gpu).set_length(*sg, kOld);
    }
  }
  ASSERT_GT(cs.capacity, 4096);
  EXPECT_EQ(old_rows(cs.k[size_t(layer)], false), k0);
  EXPECT_EQ(old_rows(cs.v[size_t(layer)], true), v0);
}

// The attention kernel rotates 8 dims a lane on one side of the rotary half:
// a rotary width that is not a multiple of 16 is refused at load, by name.
TEST(CudaBackend, RefusesARotaryWidthTheKernelsCannotTake) {
  ModelConfig c = parse_config(preset_config("35b-a3b"), "35b");
  EXPECT_NO_THROW(cuda::check_supported(c));
  for (const int rotary : {40, 258, -16}) {
    c.rotary_dim = rotary;
    try {
      cuda::check_supported(c);
      ADD_FAILURE() << "rotary " << rotary << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rotary dim"), std::string::npos) << e.what();
    }
  }
}

// The GDN out-projection's gated norm runs in the tile GEMV's staging only:
// a value width past its 32 rounds is refused at load, by name.
TEST(CudaBackend, RefusesAGdnValueWidthTheOutProjectionCannotTake) {
  ModelConfig c = parse_config(preset_config("35b-a3b"), "35b");
  c.lin_v_heads = 40;  // 5,120 values
  try {
    cuda::check_supported(c);
    ADD_FAILURE() << "40 value heads accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out-projection"), std::string::npos) << e.what();
  }
}

// Weights the kernels cannot take name what they are and the fix that works:
// --weights q4 for a dense checkpoint, tern convert for another group size.
TEST(CudaBackend, RefusesOtherWeightFormatsWithTheirFix) {
  TERN_REQUIRE_GPU();
  auto expect_refusal = [](std::shared_ptr<const ModelWeights> m, const std::string& text) {
    try {
      cuda::CudaBackend be(std::move(m));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  auto g32 = load_model(dummy_dir("tiny"), WeightMode::q4);
  g32->layers[0].moe.down[1].group = 32;  // as a group-32 conversion would read
  expect_refusal(g32, "group-32");
  expect_refusal(g32, "tern convert");
  expect_refusal(load_model(kGolden + "/hf", WeightMode::bf16), "--weights q4");
}

// tern bench --leave-out: the named kernels leave the step graph (one per
// layer for down, one for lm_head), and unknown names are refused.
TEST(CudaBackend, LeaveOutDropsKernelsAndRejectsUnknownNames) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  cuda::CudaBackend full(w), part(w);
  cuda::CudaBench full_bench(full), part_bench(part);
  EXPECT_THROW(part_bench.leave_out({"lm_head", "no_such_kernel"}), Error);
  part_bench.leave_out({"lm_head", "down"});
  auto a = full.new_sequence(), b = part.new_sequence();
  EXPECT_EQ(full_bench.step_kernels(*a) - part_bench.step_kernels(*b), 1 + w->cfg.n_layers);
}

std::vector<int32_t> generate_ids(Backend& be, Sequence& s, const std::vector<int32_t>& history,
                                  const SamplingParams& p, int max_tokens, int stop_after) {
  std::vector<int32_t> ids;
  be.start_sampling(s, p, history);
  be.generate(s, history.back(), max_tokens, [&](int32_t t) {
    ids.push_back(t);
    return int(ids.size()) < stop_after;
  });
  return ids;
}

// CPU and CUDA streams agree for a fixed seed, and the sequence each leaves
// (stopped by the callback, so the run-ahead fed the last token) continues alike.
TEST(CudaBackend, SampledGenerationEqualsCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const std::vector<int32_t> prompt = {1, 7, 42, 99, 3};
  auto run = [&](Backend& be) {
    auto s = be.new_sequence();
    std::vector<float> logits;
    be.forward(*s, std::span(prompt).first(prompt.size() - 1), Logits::last, logits);
    std::vector<int32_t> ids = generate_ids(be, *s, prompt, chat_sampling(7), 200, 96);
    EXPECT_EQ(s->length(), int64_t(prompt.size() + ids.size()));
    std::vector<int32_t> history = prompt;
    history.insert(history.end(), ids.begin(), ids.end());
    history.push_back(5);  // the next turn's first token
    const auto more = generate_ids(be, *s, history, chat_sampling(8), 32, 1000);
    EXPECT_EQ(s->length(), int64_t(history.size() + more.size() - 1));
    ids.insert(ids.end(), more.begin(), more.end());
    return ids;
  };
  EXPECT_EQ(run(gpu), run(cpu));
}

}  // namespace
}  // namespace tern::test
