#include "checkpoint/config.h"

#include "core/error.h"
#include "core/json_file.h"

namespace tern {

namespace {

using json = nlohmann::json;

// Reads one field with a clear error when it is missing or of the wrong type.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source) : obj_(obj), source_(std::move(source)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  int get_int(const char* key) const {
    const json& v = require(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (1 << 30))
      fail("{}: field '{}' must be a positive integer, got {}", source_, key, v.dump());
    return v.get<int>();
  }
  double get_number(const char* key) const {
    const json& v = require(key);
    if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", source_, key, v.dump());
    return v.get<double>();
  }
  bool get_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_boolean()) fail("{}: field '{}' must be true or false", source_, key);
    return obj_[key].get<bool>();
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_string()) fail("{}: field '{}' must be a string", source_, key);
    return obj_[key].get<std::string>();
  }
  const json& require(const char* key) const {
    if (!has(key)) fail("{}: missing field '{}'", source_, key);
    return obj_[key];
  }

 private:
  const json& obj_;
  std::string source_;
};

std::vector<LayerType> read_layer_types(const FieldReader& f, const json& text, int n_layers,
                                        const std::string& src) {
  std::vector<LayerType> types;
  if (f.has("layer_types")) {
    const json& lt = text["layer_types"];
    if (!lt.is_array() || int(lt.size()) != n_layers)
      fail("{}: field 'layer_types' must be a list of {} entries (num_hidden_layers)", src,
           n_layers);
    for (const json& t : lt) {
      if (t == "linear_attention")
        types.push_back(LayerType::linear_attention);
      else if (t == "full_attention")
        types.push_back(LayerType::full_attention);
      else
        fail("{}: unsupported entry {} in 'layer_types'", src, t.dump());
    }
  } else {
    // Older spelling: full attention at every interval-th layer (i+1) % n == 0.
    int interval = f.get_int("full_attention_interval");
    for (int i = 0; i < n_layers; ++i)
      types.push_back((i + 1) % interval == 0 ? LayerType::full_attention
                                              : LayerType::linear_attention);
  }
  return types;
}

QuantSpec read_quant_spec(const json& q, const std::string& where) {
  QuantSpec s;
  if (!q.contains("bits") || !q["bits"].is_number_integer())
    fail("{}: quantisation needs an integer 'bits'", where);
  if (!q.contains("group_size") || !q["group_size"].is_number_integer())
    fail("{}: quantisation needs an integer 'group_size'", where);
  s.bits = q["bits"].get<int>();
  s.group = q["group_size"].get<int>();
  if (s.bits != 4 && s.bits != 8)
    fail("{}: unsupported quantisation bits {} (4 or 8)", where, s.bits);
  if (s.group != 32 && s.group != 64 && s.group != 128)
    fail("{}: unsupported quantisation group_size {} (32, 64 or 128)", where, s.group);
  if (q.contains("mode") && q["mode"] != "affine")
    fail("{}: unsupported quantisation mode {} (only affine)", where, q["mode"].dump());
  return s;
}

}  // namespace

int ModelConfig::n_linear_layers() const {
  int n = 0;
  for (LayerType t : layer_types) n += t == LayerType::linear_attention;
  return n;
}

QuantSpec ModelConfig::quant_for(const std::string& module) const {
  auto it = quant_overrides.find(module);
  if (it != quant_overrides.end()) return it->second.value_or(QuantSpec{});
  return quant.value_or(QuantSpec{});
}

ModelConfig parse_config(const json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: config must be a JSON object", source);
  const bool nested = j.contains("text_config");
  const json& text = nested ? j["text_config"] : j;
  const std::string src = nested ? source + " (text_config)" : source;
  if (!text.is_object()) fail("{}: 'text_config' must be an object", source);
  FieldReader f(text, src);

  std::string model_type = f.get_string("model_type", "");
  if (model_type != "" && model_type != "qwen3_5_moe_text" && model_type != "qwen3_5_moe" &&
      model_type != "qwen3_next")
    fail("{}: unsupported model_type '{}' (expected qwen3_5_moe_text)", src, model_type);

  ModelConfig c;
  c.raw = j;
  c.hidden = f.get_int("hidden_size");
  c.n_layers = f.get_int("num_hidden_layers");
  c.layer_types = read_layer_types(f, text, c.n_layers, src);
  c.n_heads = f.get_int("num_attention_heads");
  c.n_kv_heads = f.get_int("num_key_value_heads");
  c.head_dim = f.get_int("head_dim");
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", src, c.n_heads,
         c.n_kv_heads);

  // RoPE: the newer "rope_parameters" object, or the older top-level fields.
  const json* rope = f.has("rope_parameters") ? &text["rope_parameters"] : nullptr;
  if (rope && !rope->is_object()) fail("{}: field 'rope_parameters' must be an object", src);
  FieldReader rf(rope ? *rope : text, rope ? src + " rope_parameters" : src);
  c.rope_theta = float(rf.get_number("rope_theta"));
  std::string rope_type = rf.get_string("rope_type", "default");
  if (rope_type != "default") fail("{}: unsupported rope_type '{}' (only default)", src, rope_type);
  double partial = rf.has("partial_rotary_factor") ? rf.get_number("partial_rotary_factor")
                                                   : f.get_number("partial_rotary_factor");
  c.rotary_dim = int(partial * c.head_dim + 0.5);
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} gives an invalid rotary width {}", src, partial,
         c.rotary_dim);

  c.lin_k_heads = f.get_int("linear_num_key_heads");
  c.lin_v_heads = f.get_int("linear_num_value_heads");
  c.lin_k_dim = f.get_int("linear_key_head_dim");
  c.lin_v_dim = f.get_int("linear_value_head_dim");
  c.conv_kernel = f.get_int("linear_conv_kernel_dim");
  if (c.lin_v_heads % c.lin_k_heads != 0)
    fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", src,
         c.lin_v_heads, c.lin_k_heads);

  c.n_experts = f.get_int("num_experts");
  c.top_k = f.get_int("num_experts_per_tok");
  if (c.top_k > c.n_experts)
    fail("{}: num_experts_per_tok {} exceeds num_experts {}", src, c.top_k, c.n_experts);
  c.moe_inter = f.get_int("moe_intermediate_size");
  c.shared_inter = f.get_int("shared_expert_intermediate_size");
  c.norm_topk = f.get_bool("norm_topk_prob", true);
  c.vocab = f.get_int("vocab_size");
  c.rms_eps = float(f.get_number("rms_norm_eps"));
  c.tie_embeddings = f.get_bool("tie_word_embeddings",
                                FieldReader(j, source).get_bool("tie_word_embeddings", false));
  c.max_positions =
      f.has("max_position_embeddings") ? f.get_int("max_position_embeddings") : 262144;

  if (f.get_string("hidden_act", "silu") != "silu")
    fail("{}: unsupported hidden_act '{}' (only silu)", src, f.get_string("hidden_act", ""));
  if (f.get_bool("attention_bias", false)) fail("{}: attention_bias true is not supported", src);
  if (!f.get_bool("attn_output_gate", true))
    fail("{}: attn_output_gate false is not supported", src);
  if (f.has("mlp_only_layers") && !text["mlp_only_layers"].empty())
    fail("{}: dense MLP layers (mlp_only_layers) are not supported", src);
  if (f.has("decoder_sparse_step") && text["decoder_sparse_step"] != 1)
    fail("{}: decoder_sparse_step other than 1 is not supported", src);

  for (const json* o : {&text, &j}) {
    if (o->contains("eos_token_id")) {
      const json& e = (*o)["eos_token_id"];
      if (e.is_number_integer()) c.eos_ids.push_back(e.get<int>());
      if (e.is_array())
        for (const json& x : e)
          if (x.is_number_integer()) c.eos_ids.push_back(x.get<int>());
      break;
    }
  }

  const char* qkey = j.contains("quantization")          ? "quantization"
                     : j.contains("quantization_config") ? "quantization_config"
                                                         : nullptr;
  if (qkey) {
    const json& q = j[qkey];
    if (!q.is_object()) fail("{}: '{}' must be an object", source, qkey);
    c.quant = read_quant_spec(q, source + " " + qkey);
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it.value().is_object())
        c.quant_overrides[it.key()] = read_quant_spec(it.value(), source + " " + it.key());
      else if (it.value().is_boolean() && !it.value().get<bool>())
        c.quant_overrides[it.key()] = std::nullopt;
    }
  }
  return c;
}

ModelConfig load_config(const std::string& path) {
  return parse_config(read_json_file(path), path);
}

}  // namespace tern
