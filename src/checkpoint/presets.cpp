// Built-in model configurations for make-dummy and bench --dummy. "35b-a3b" is
// the published Qwen3.6-35B-A3B config.json (text and top-level fields); "tiny"
// keeps every structural feature (both layer types, GQA, partial rotary, value
// heads = 2 x key heads, top-k > 1 of many experts) at a size tests can afford;
// "mid" has the real widths in 4 layers.
#include "checkpoint/config.h"
#include "core/error.h"

namespace tern {

namespace {

const char* kTiny = R"JSON({
 "architectures": [
  "Qwen3_5MoeForConditionalGeneration"
 ],
 "model_type": "qwen3_5_moe",
 "tie_word_embeddings": false,
 "text_config": {
  "model_type": "qwen3_5_moe_text",
  "hidden_size": 128,
  "num_hidden_layers": 4,
  "layer_types": [
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention"
  ],
  "full_attention_interval": 4,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 256,
  "attn_output_gate": true,
  "attention_bias": false,
  "linear_num_key_heads": 2,
  "linear_num_value_heads": 4,
  "linear_key_head_dim": 128,
  "linear_value_head_dim": 128,
  "linear_conv_kernel_dim": 4,
  "num_experts": 16,
  "num_experts_per_tok": 4,
  "moe_intermediate_size": 64,
  "shared_expert_intermediate_size": 64,
  "hidden_act": "silu",
  "vocab_size": 1024,
  "rms_norm_eps": 1e-06,
  "tie_word_embeddings": false,
  "max_position_embeddings": 262144,
  "partial_rotary_factor": 0.25,
  "rope_parameters": {
   "rope_type": "default",
   "rope_theta": 10000000,
   "partial_rotary_factor": 0.25,
   "mrope_section": [
    11,
    11,
    10
   ],
   "mrope_interleaved": true
  },
  "mamba_ssm_dtype": "float32",
  "eos_token_id": 248044,
  "dtype": "bfloat16"
 }
})JSON";

const char* k35bA3b = R"JSON({
 "architectures": [
  "Qwen3_5MoeForConditionalGeneration"
 ],
 "image_token_id": 248056,
 "model_type": "qwen3_5_moe",
 "text_config": {
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_output_gate": true,
  "bos_token_id": 248044,
  "dtype": "bfloat16",
  "eos_token_id": 248044,
  "full_attention_interval": 4,
  "head_dim": 256,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "layer_types": [
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention",
   "linear_attention",
   "linear_attention",
   "linear_attention",
   "full_attention"
  ],
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_value_head_dim": 128,
  "mamba_ssm_dtype": "float32",
  "max_position_embeddings": 262144,
  "model_type": "qwen3_5_moe_text",
  "moe_intermediate_size": 512,
  "mtp_num_hidden_layers": 1,
  "mtp_use_dedicated_embeddings": false,
  "num_attention_heads": 16,
  "num_experts": 256,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 40,
  "num_key_value_heads": 2,
  "output_router_logits": false,
  "pad_token_id": null,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
   "mrope_interleaved": true,
   "mrope_section": [
    11,
    11,
    10
   ],
   "partial_rotary_factor": 0.25,
   "rope_theta": 10000000,
   "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false,
  "use_cache": true,
  "vocab_size": 248320
 },
 "tie_word_embeddings": false,
 "transformers_version": "4.57.1",
 "video_token_id": 248057,
 "vision_config": {
  "deepstack_visual_indexes": [],
  "depth": 27,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "in_channels": 3,
  "initializer_range": 0.02,
  "intermediate_size": 4304,
  "model_type": "qwen3_5_moe",
  "num_heads": 16,
  "num_position_embeddings": 2304,
  "out_hidden_size": 2048,
  "patch_size": 16,
  "spatial_merge_size": 2,
  "temporal_patch_size": 2
 },
 "vision_end_token_id": 248054,
 "vision_start_token_id": 248053
})JSON";

}  // namespace

nlohmann::json preset_config(const std::string& name) {
  if (name == "tiny") return nlohmann::json::parse(kTiny);
  if (name == "35b-a3b") return nlohmann::json::parse(k35bA3b);
  if (name == "mid") {
    // Every width of 35b-a3b (so the CUDA tile paths run as on the real
    // model) in 4 layers: 3 GDN + 1 attention, as one quarter of the model.
    nlohmann::json j = nlohmann::json::parse(k35bA3b);
    auto& t = j["text_config"];
    t["num_hidden_layers"] = 4;
    t["layer_types"] = {"linear_attention", "linear_attention", "linear_attention",
                        "full_attention"};
    return j;
  }
  fail("unknown preset '{}' (tiny, mid or 35b-a3b)", name);
}

}  // namespace tern
