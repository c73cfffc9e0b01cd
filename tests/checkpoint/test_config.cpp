// config.json parsing: the published wrapper, text-only files, MLX quantisation
// blocks, and an error naming the field for every missing or unsupported value.
#include <gtest/gtest.h>

#include "checkpoint/config.h"
#include "core/error.h"

namespace tern {

using json = nlohmann::json;

static std::string error_of(const json& j) {
  try {
    parse_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, PublishedQwen36) {
  ModelConfig c = parse_config(preset_config("35b-a3b"), "35b");
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.n_layers, 40);
  EXPECT_EQ(c.n_linear_layers(), 30);
  EXPECT_EQ(c.layer_types[3], LayerType::full_attention);
  EXPECT_EQ(c.layer_types[4], LayerType::linear_attention);
  EXPECT_EQ(c.n_heads, 16);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e7f);
  EXPECT_EQ(c.conv_channels(), 8192);
  EXPECT_EQ(c.lin_value_dim(), 4096);
  EXPECT_EQ(c.n_experts, 256);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.moe_inter, 512);
  EXPECT_EQ(c.vocab, 248320);
  EXPECT_TRUE(c.norm_topk);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.quant.has_value());
  EXPECT_EQ(c.eos_ids, std::vector<int>{248044});
}

TEST(Config, TextOnlyAndIntervalSchedule) {
  json j = preset_config("35b-a3b")["text_config"];
  j.erase("layer_types");
  j["full_attention_interval"] = 4;
  ModelConfig c = parse_config(j, "flat");
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(c.layer_types[size_t(i)] == LayerType::full_attention, i % 4 == 3) << i;
}

TEST(Config, OldRopeFields) {
  json j = preset_config("tiny");
  j["text_config"].erase("rope_parameters");
  j["text_config"]["rope_theta"] = 5000;
  ModelConfig c = parse_config(j, "x");
  EXPECT_FLOAT_EQ(c.rope_theta, 5000.0f);
  EXPECT_EQ(c.rotary_dim, 64);
}

TEST(Config, MlxQuantisationWithOverrides) {
  json j = preset_config("tiny");
  j["quantization"] = {
      {"group_size", 64},
      {"bits", 4},
      {"mode", "affine"},
      {"language_model.model.layers.0.mlp.gate", {{"group_size", 64}, {"bits", 8}}},
      {"language_model.model.layers.1.mlp.gate", false}};
  ModelConfig c = parse_config(j, "x");
  ASSERT_TRUE(c.quant.has_value());
  EXPECT_EQ(c.quant_for("language_model.model.layers.0.mlp.gate").bits, 8);
  EXPECT_EQ(c.quant_for("language_model.model.layers.1.mlp.gate").bits, 0);
  EXPECT_EQ(c.quant_for("language_model.model.layers.0.self_attn.q_proj").bits, 4);
}

TEST(Config, MissingFieldsAreNamed) {
  for (const char* field :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok",
        "moe_intermediate_size", "shared_expert_intermediate_size", "vocab_size", "rms_norm_eps"}) {
    json j = preset_config("tiny");
    j["text_config"].erase(field);
    EXPECT_NE(error_of(j).find(std::string("'") + field + "'"), std::string::npos)
        << field << ": " << error_of(j);
  }
  json j = preset_config("tiny");
  j["text_config"]["rope_parameters"].erase("rope_theta");
  EXPECT_NE(error_of(j).find("'rope_theta'"), std::string::npos);
  j = preset_config("tiny");
  j["text_config"].erase("layer_types");
  j["text_config"].erase("full_attention_interval");
  EXPECT_NE(error_of(j).find("'full_attention_interval'"), std::string::npos);
}

TEST(Config, UnsupportedValuesAreErrors) {
  auto with = [](const char* key, json v) {
    json j = preset_config("tiny");
    j["text_config"][key] = v;
    return error_of(j);
  };
  EXPECT_NE(with("hidden_size", "big").find("positive integer"), std::string::npos);
  EXPECT_NE(with("hidden_size", -3).find("positive integer"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("hidden_act"), std::string::npos);
  EXPECT_NE(with("attention_bias", true).find("attention_bias"), std::string::npos);
  EXPECT_NE(with("layer_types", json::array({"linear_attention"})).find("layer_types"),
            std::string::npos);
  EXPECT_NE(with("layer_types", json::array({"mamba", "mamba", "mamba", "mamba"})).find("mamba"),
            std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 3).find("multiple"), std::string::npos);
  EXPECT_NE(with("num_experts_per_tok", 99).find("exceeds"), std::string::npos);
  EXPECT_NE(with("model_type", "llama").find("model_type"), std::string::npos);
  json j = preset_config("tiny");
  j["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(error_of(j).find("rope_type"), std::string::npos);
  j = preset_config("tiny");
  j["quantization"] = {{"group_size", 64}, {"bits", 3}};
  EXPECT_NE(error_of(j).find("bits 3"), std::string::npos);
  j["quantization"] = {{"group_size", 64}, {"bits", 4}, {"mode", "mxfp4"}};
  EXPECT_NE(error_of(j).find("mxfp4"), std::string::npos);
  EXPECT_NE(error_of(json::array()).find("object"), std::string::npos);
}

TEST(Config, BadFile) {
  EXPECT_THROW(load_config("/nonexistent/config.json"), Error);
}

}  // namespace tern
