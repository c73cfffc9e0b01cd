#include "checkpoint/dummy.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "core/bf16.h"
#include "core/error.h"
#include "core/json_file.h"
#include "core/rng.h"

namespace tern {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Approximately normal (sum of four uniforms, variance matched): cheap enough
// for the 35B parameters of a full-size dummy.
inline float fast_normal(uint64_t bits) {
  float s = float(bits & 0xffff) + float((bits >> 16) & 0xffff) + float((bits >> 32) & 0xffff) +
            float(bits >> 48);
  return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

}  // namespace

void RandomSource::rows(const LogicalTensor& t, int64_t r0, int64_t n, float* out) const {
  const uint64_t key = hash_name(t.name, seed_);
  // Scales keep activations O(1) through every layer: inputs N(0, 1/in), the
  // residual branches' outputs smaller so that 2 x layers branches add up to a
  // stream of modest size, and a head that makes logits of std ~3.
  float std = 1.0f / std::sqrt(float(t.cols));
  if (t.residual_out) std *= 0.3f;
  if (t.name == "lm_head.weight") std *= 3.0f;
  if (t.role == Role::embedding) std = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = r0 + i;
    float* o = out + i * t.cols;
    for (int64_t j = 0; j < t.cols; ++j) {
      const uint64_t bits = splitmix64(key ^ splitmix64(uint64_t(r * t.cols + j)));
      const float z = fast_normal(bits);
      const float u = float(bits >> 40) * (1.0f / 16777216.0f);
      switch (t.role) {
        // 1 + w exact in bf16 (so is w): the MLX file, which stores 1 + w, holds
        // the same function as the Hugging Face file, which stores w.
        case Role::norm_1p:
          o[j] = round_bf16(1.0f + 0.1f * z);
          break;
        case Role::gated_norm:
          o[j] = round_bf16(1.0f + 0.1f * z);
          break;
        case Role::conv:
          o[j] = round_bf16(0.5f * z);
          break;
        case Role::a_log:
          o[j] = std::log(1.0f + 15.0f * u);
          break;
        case Role::dt_bias:
          o[j] = round_bf16(2.0f * u - 1.0f);
          break;
        default:
          o[j] = round_bf16(std * z);
          break;
      }
    }
  }
}

int tokenizer_id_count(const std::string& path) {
  const json j = read_json_file(path);
  int64_t n = 0;
  if (j.contains("model") && j["model"].contains("vocab") && j["model"]["vocab"].is_object())
    for (const auto& kv : j["model"]["vocab"].items())
      if (kv.value().is_number_integer()) n = std::max<int64_t>(n, kv.value().get<int64_t>() + 1);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& t : j["added_tokens"])
      if (t.contains("id") && t["id"].is_number_integer())
        n = std::max<int64_t>(n, t["id"].get<int64_t>() + 1);
  if (n == 0) fail("{}: no vocabulary found", path);
  return int(n);
}

void make_dummy(const DummyOptions& opt) {
  json cfg_json =
      opt.config_file.empty() ? preset_config(opt.preset) : read_json_file(opt.config_file);
  json& text = cfg_json.contains("text_config") ? cfg_json["text_config"] : cfg_json;
  fs::create_directories(opt.out_dir);
  if (!opt.tokenizer_dir.empty()) {
    const fs::path tj = fs::path(opt.tokenizer_dir) / "tokenizer.json";
    const int ids = tokenizer_id_count(tj.string());
    if (text.value("vocab_size", 0) < ids) {
      const int padded = (ids + 63) / 64 * 64;
      spdlog::info("vocabulary grown to {} to cover the tokenizer's {} ids", padded, ids);
      text["vocab_size"] = padded;
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "chat_template.jinja"}) {
      const fs::path p = fs::path(opt.tokenizer_dir) / f;
      if (fs::exists(p))
        fs::copy_file(p, fs::path(opt.out_dir) / f, fs::copy_options::overwrite_existing);
    }
  }
  ModelConfig cfg = parse_config(cfg_json, "dummy config");
  RandomSource src(opt.seed);
  write_checkpoint(cfg_json, src, opt.layout, opt.out_dir);
}

}  // namespace tern
