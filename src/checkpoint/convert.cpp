#include "checkpoint/convert.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/weights.h"
#include "core/error.h"

namespace tern {

namespace fs = std::filesystem;

namespace {

// Logical weights read from a checkpoint loaded without quantisation.
class LoadedSource : public WeightSource {
 public:
  explicit LoadedSource(const ModelWeights& w) : w_(w) {
    matrices_["embed_tokens.weight"] = &w.embed;
    matrices_["lm_head.weight"] = &w.lm_head;
    vectors_["norm.weight"] = &w.final_norm;
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LayerWeights& L = w.layers[i];
      const std::string p = "layers." + std::to_string(i) + ".";
      for (auto [tail, m] : std::initializer_list<std::pair<const char*, const QTensor*>>{
               {"linear_attn.in_proj_qkv.weight", &L.gdn.in_qkv},
               {"linear_attn.in_proj_z.weight", &L.gdn.in_z},
               {"linear_attn.in_proj_b.weight", &L.gdn.in_b},
               {"linear_attn.in_proj_a.weight", &L.gdn.in_a},
               {"linear_attn.out_proj.weight", &L.gdn.out},
               {"self_attn.q_proj.weight", &L.attn.q},
               {"self_attn.k_proj.weight", &L.attn.k},
               {"self_attn.v_proj.weight", &L.attn.v},
               {"self_attn.o_proj.weight", &L.attn.o},
               {"mlp.gate.weight", &L.moe.router},
               {"mlp.shared_expert_gate.weight", &L.moe.shared_expert_gate},
               {"mlp.shared_expert.gate_proj.weight", &L.moe.shared_gate},
               {"mlp.shared_expert.up_proj.weight", &L.moe.shared_up},
               {"mlp.shared_expert.down_proj.weight", &L.moe.shared_down}})
        matrices_[p + tail] = m;
      for (auto [tail, v] :
           std::initializer_list<std::pair<const char*, const std::vector<float>*>>{
               {"input_layernorm.weight", &L.in_norm},
               {"post_attention_layernorm.weight", &L.post_norm},
               {"linear_attn.conv1d.weight", &L.gdn.conv},
               {"linear_attn.dt_bias", &L.gdn.dt_bias},
               {"linear_attn.A_log", &L.gdn.a_log},
               {"linear_attn.norm.weight", &L.gdn.norm},
               {"self_attn.q_norm.weight", &L.attn.q_norm},
               {"self_attn.k_norm.weight", &L.attn.k_norm}})
        vectors_[p + tail] = v;
    }
  }

  void rows(const LogicalTensor& t, int64_t r0, int64_t n, float* out) const override {
    for (int64_t i = 0; i < n; ++i) row(t, r0 + i, out + i * t.cols);
  }

 private:
  void row(const LogicalTensor& t, int64_t r, float* out) const {
    if (t.role == Role::experts) {
      const MoeWeights& m = w_.layers[std::stoul(t.name.substr(7))].moe;
      const size_t e = size_t(r / t.rows);
      const int64_t k = r % t.rows;
      if (t.name.ends_with("down_proj")) return m.down[e].dequant_row(k, out);
      const int64_t half = t.rows / 2;  // gate rows, then up rows
      return k < half ? m.gate[e].dequant_row(k, out) : m.up[e].dequant_row(k - half, out);
    }
    if (auto it = matrices_.find(t.name); it != matrices_.end())
      return it->second->dequant_row(r, out);
    auto it = vectors_.find(t.name);
    if (it == vectors_.end()) fail("convert: no source for tensor {}", t.name);
    std::memcpy(out, it->second->data() + r * t.cols, size_t(t.cols) * sizeof(float));
  }

  const ModelWeights& w_;
  std::map<std::string, const QTensor*> matrices_;
  std::map<std::string, const std::vector<float>*> vectors_;
};

}  // namespace

void convert_checkpoint(const std::string& in_dir, const std::string& out_dir) {
  for (const std::string& n : TensorStore(in_dir).names())
    if (n.ends_with(".scales"))
      fail("{}: already quantised ({}); convert reads Hugging Face bf16 checkpoints", in_dir, n);
  auto w = load_model(in_dir, WeightMode::bf16);
  LoadedSource src(*w);
  write_checkpoint(w->cfg.raw, src, Layout::mlx4, out_dir);
  for (const auto& e : fs::directory_iterator(in_dir)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("tokenizer") || f == "generation_config.json" || f == "chat_template.jinja" ||
        f == "special_tokens_map.json" || f == "vocab.json" || f == "merges.txt")
      fs::copy_file(e.path(), fs::path(out_dir) / f, fs::copy_options::overwrite_existing);
  }
  spdlog::info("converted {} to 4-bit MLX layout in {}", in_dir, out_dir);
}

}  // namespace tern
