// The model configuration, read from a Hugging Face or MLX config.json.
// Every size comes from the file; a missing or unsupported value is an error
// that names the field. Text fields may sit under "text_config" (the published
// multimodal wrapper) or at the top level (text-only exports).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tern {

enum class LayerType { linear_attention, full_attention };

// Affine group quantisation of one module: bits == 0 means not quantised.
struct QuantSpec {
  int bits = 0;
  int group = 64;
};

struct ModelConfig {
  int hidden = 0;
  int n_layers = 0;
  std::vector<LayerType> layer_types;
  // Full attention.
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  float rope_theta = 0;
  // Gated DeltaNet.
  int lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
  // Mixture of experts.
  int n_experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0;
  bool norm_topk = true;
  int vocab = 0;
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  int max_positions = 0;
  std::vector<int> eos_ids;

  // Quantisation block of MLX conversions (absent: not quantised).
  std::optional<QuantSpec> quant;
  std::map<std::string, std::optional<QuantSpec>> quant_overrides;  // nullopt: "false"

  nlohmann::json raw;  // the whole file, for writing converted configs

  int lin_key_dim() const { return lin_k_heads * lin_k_dim; }
  int lin_value_dim() const { return lin_v_heads * lin_v_dim; }
  int conv_channels() const { return 2 * lin_key_dim() + lin_value_dim(); }
  int n_linear_layers() const;
  int n_full_layers() const { return n_layers - n_linear_layers(); }
  // The quantisation a module path (without ".weight") has in the config.
  QuantSpec quant_for(const std::string& module) const;
};

ModelConfig parse_config(const nlohmann::json& j, const std::string& source);
ModelConfig load_config(const std::string& path);
// Built-in configurations for make-dummy: "tiny" and "35b-a3b".
nlohmann::json preset_config(const std::string& name);

}  // namespace tern
