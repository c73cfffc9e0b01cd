#include "checkpoint/weights.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <set>

#include "core/error.h"

namespace tern {

namespace fs = std::filesystem;

WeightMode weight_mode_from_name(const std::string& s) {
  if (s == "q4") return WeightMode::q4;
  if (s == "bf16") return WeightMode::bf16;
  fail("unknown --weights '{}' (q4 or bf16)", s);
}

namespace {

bool is_skipped_name(const std::string& n) {
  return n.starts_with("mtp.") || n.find(".mtp.") != std::string::npos ||
         n.starts_with("model.visual.") || n.starts_with("visual.") ||
         n.starts_with("vision_tower.") || n.find(".vision_tower.") != std::string::npos;
}

// Maps the checkpoint's tensors onto ModelWeights, checking every shape and dtype.
class Loader {
 public:
  Loader(const TensorStore& st, ModelWeights& mw, WeightMode mode)
      : st_(st), mw_(mw), cfg_(mw.cfg), mode_(mode) {}

  void load() {
    detect_layout();
    const int D = cfg_.hidden;
    mw_.embed = matrix(prefix_ + "embed_tokens", cfg_.vocab, D, 4);
    mw_.final_norm = norm_1p(prefix_ + "norm.weight", D);
    if (cfg_.tie_embeddings) {
      mw_.lm_head = mw_.embed;
    } else {
      std::string head = prefix_ == "language_model.model." ? "language_model.lm_head" : "lm_head";
      mw_.lm_head = matrix(head, cfg_.vocab, D, 4);
    }
    for (int i = 0; i < cfg_.n_layers; ++i) mw_.layers.push_back(layer(i));
    for (const std::string& n : st_.names()) {
      if (used_.count(n)) continue;
      if (!is_skipped_name(n))
        fail("{}: unknown tensor {} in {} (layout {})", st_.dir(), n, st_.get(n).file, mw_.layout);
      mw_.skipped.push_back(n);
    }
    if (!mw_.skipped.empty()) {
      spdlog::info("skipped {} tensors not used by the text model (vision tower, MTP), e.g. {}",
                   mw_.skipped.size(), mw_.skipped.front());
      for (const std::string& n : mw_.skipped) spdlog::debug("skipped tensor {}", n);
    }
  }

 private:
  void detect_layout() {
    const std::string probe = "layers.0.input_layernorm.weight";
    for (const char* p : {"model.language_model.", "language_model.model.", "model."}) {
      if (st_.has(p + probe)) {
        prefix_ = p;
        break;
      }
    }
    if (prefix_.empty())
      fail(
          "{}: unknown layout: no tensor '<prefix>{}' with a known prefix (model.language_model., "
          "language_model.model. or model.)",
          st_.dir(), probe);
    // MLX conversions store conv1d as [C, K, 1] and bake 1+w into the norms;
    // Hugging Face files use [C, 1, K] (mlx-lm tells the two apart the same way).
    mlx_ = prefix_ == "language_model.model.";
    for (int i = 0; i < cfg_.n_layers; ++i) {
      if (cfg_.layer_types[size_t(i)] != LayerType::linear_attention) continue;
      const TensorView* conv = st_.find(layer_prefix(i) + "linear_attn.conv1d.weight");
      if (conv && conv->shape.size() == 3) mlx_ = conv->shape[2] == 1;
      break;
    }
    mw_.layout = mlx_ ? "mlx" : "hf";
  }

  std::string layer_prefix(int i) const { return prefix_ + "layers." + std::to_string(i) + "."; }

  const TensorView& tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* v = st_.find(name);
    if (!v)
      fail("{}: missing tensor {} (expected shape {})", st_.dir(), name, shape_to_string(shape));
    if (v->shape != shape)
      fail("{}: tensor {} has shape {}, expected {}", v->file, name, v->shape_str(),
           shape_to_string(shape));
    used_.insert(name);
    return *v;
  }

  static void require_float(const TensorView& v) {
    if (v.dtype != DType::bf16 && v.dtype != DType::f16 && v.dtype != DType::f32)
      fail("{}: tensor {} has dtype {}, expected BF16, F16 or F32", v.file, v.name, v.dtype_str);
  }

  std::vector<float> vec(const std::string& name, int64_t n) {
    const TensorView& v = tensor(name, {n});
    require_float(v);
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_scalar(v.dtype, v.data, size_t(i));
    return out;
  }

  // A zero-centred RMSNorm weight as its multiplier 1 + w (MLX files store it so).
  std::vector<float> norm_1p(const std::string& name, int64_t n) {
    std::vector<float> w = vec(name, n);
    if (!mlx_)
      for (float& x : w) x += 1.0f;
    return w;
  }

  // A matrix [rows, cols] (or `stack` matrices of it, one after another): the
  // quantised form when the file has one, else dense, quantised now in q4 mode.
  QTensor matrix(const std::string& base, int64_t rows, int64_t cols, int q4_bits,
                 int64_t stack = 0, const std::string& weight_suffix = ".weight") {
    auto dims = [&](int64_t c) {
      return stack ? std::vector<int64_t>{stack, rows, c} : std::vector<int64_t>{rows, c};
    };
    const int64_t total_rows = (stack ? stack : 1) * rows;
    QTensor t;
    t.rows = total_rows;
    t.cols = cols;
    if (st_.has(base + ".scales")) {
      if (mode_ == WeightMode::bf16)
        fail("{}: {} is quantised; --weights bf16 needs a bf16 checkpoint", st_.dir(), base);
      const TensorView* w = st_.find(base + ".weight");
      if (!w) fail("{}: missing tensor {}.weight next to {}.scales", st_.dir(), base, base);
      if (w->dtype != DType::u32 || w->shape.size() != dims(0).size())
        fail("{}: tensor {} must be U32 of rank {} (quantised), got {} {}", w->file, w->name,
             dims(0).size(), w->dtype_str, w->shape_str());
      const int64_t words = w->shape.back();
      const int bits = int(words * 32 / cols);
      if (words * 32 != cols * bits || (bits != 4 && bits != 8))
        fail("{}: tensor {} has {} words per row for {} inputs: not 4- or 8-bit", w->file, w->name,
             words, cols);
      const TensorView& s = st_.get(base + ".scales");
      const int64_t n_groups = s.shape.empty() ? 0 : s.shape.back();
      if (n_groups <= 0 || cols % n_groups != 0)
        fail("{}: tensor {} has shape {}: no group size divides {} inputs", s.file, s.name,
             s.shape_str(), cols);
      const int group = int(cols / n_groups);
      QuantSpec spec = cfg_.quant_for(base);
      if (cfg_.quant && (spec.bits != bits || spec.group != group))
        fail("{}: {} is stored as {}-bit group {}, but config.json says {}-bit group {}", st_.dir(),
             base, bits, group, spec.bits, spec.group);
      tensor(base + ".weight", dims(words));
      const TensorView& sc = tensor(base + ".scales", dims(n_groups));
      const TensorView& bi = tensor(base + ".biases", dims(n_groups));
      require_float(sc);
      if (bi.dtype != sc.dtype)
        fail("{}: {}.biases is {} but {}.scales is {}", bi.file, base, bi.dtype_str, base,
             sc.dtype_str);
      t.fmt = WFormat::affine;
      t.dtype = sc.dtype;
      t.bits = bits;
      t.group = group;
      t.data = w->data;
      t.scales = sc.data;
      t.biases = bi.data;
      return t;
    }
    const TensorView& v = tensor(base + weight_suffix, dims(cols));
    require_float(v);
    t.fmt = WFormat::dense;
    t.dtype = v.dtype;
    t.data = v.data;
    if (mode_ == WeightMode::q4 && cols % 64 == 0) {
      mw_.owned.push_back(quantize_matrix(t, q4_bits, 64));
      return mw_.owned.back().view(total_rows, cols, q4_bits, 64);
    }
    return t;
  }

  void experts(const std::string& p, MoeWeights& m) {
    const int64_t E = cfg_.n_experts, I = cfg_.moe_inter, D = cfg_.hidden;
    m.gate.resize(static_cast<size_t>(E));
    m.up.resize(static_cast<size_t>(E));
    m.down.resize(static_cast<size_t>(E));
    if (st_.has(p + "switch_mlp.gate_proj.weight")) {  // MLX stacks
      QTensor g = matrix(p + "switch_mlp.gate_proj", I, D, 4, E);
      QTensor u = matrix(p + "switch_mlp.up_proj", I, D, 4, E);
      QTensor d = matrix(p + "switch_mlp.down_proj", D, I, 4, E);
      for (int64_t e = 0; e < E; ++e) {
        m.gate[size_t(e)] = g.row_slice(e * I, I);
        m.up[size_t(e)] = u.row_slice(e * I, I);
        m.down[size_t(e)] = d.row_slice(e * D, D);
      }
    } else if (st_.has(p + "experts.gate_up_proj")) {  // HF fused, no .weight suffix
      QTensor gu = matrix(p + "experts.gate_up_proj", 2 * I, D, 4, E, "");
      QTensor d = matrix(p + "experts.down_proj", D, I, 4, E, "");
      for (int64_t e = 0; e < E; ++e) {
        m.gate[size_t(e)] = gu.row_slice(e * 2 * I, I);
        m.up[size_t(e)] = gu.row_slice(e * 2 * I + I, I);
        m.down[size_t(e)] = d.row_slice(e * D, D);
      }
    } else {  // per-expert tensors
      for (int64_t e = 0; e < E; ++e) {
        std::string q = p + "experts." + std::to_string(e) + ".";
        m.gate[size_t(e)] = matrix(q + "gate_proj", I, D, 4);
        m.up[size_t(e)] = matrix(q + "up_proj", I, D, 4);
        m.down[size_t(e)] = matrix(q + "down_proj", D, I, 4);
      }
    }
  }

  LayerWeights layer(int i) {
    const std::string p = layer_prefix(i);
    const int64_t D = cfg_.hidden;
    LayerWeights L;
    L.type = cfg_.layer_types[size_t(i)];
    L.in_norm = norm_1p(p + "input_layernorm.weight", D);
    L.post_norm = norm_1p(p + "post_attention_layernorm.weight", D);
    if (L.type == LayerType::linear_attention) {
      const std::string a = p + "linear_attn.";
      const int64_t C = cfg_.conv_channels(), Hv = cfg_.lin_v_heads, K = cfg_.conv_kernel;
      GdnWeights& g = L.gdn;
      g.in_qkv = matrix(a + "in_proj_qkv", C, D, 4);
      g.in_z = matrix(a + "in_proj_z", cfg_.lin_value_dim(), D, 4);
      g.in_b = matrix(a + "in_proj_b", Hv, D, 4);
      g.in_a = matrix(a + "in_proj_a", Hv, D, 4);
      g.out = matrix(a + "out_proj", D, cfg_.lin_value_dim(), 4);
      const TensorView& cv = tensor(a + "conv1d.weight", mlx_ ? std::vector<int64_t>{C, K, 1}
                                                              : std::vector<int64_t>{C, 1, K});
      require_float(cv);
      g.conv.resize(size_t(C * K));
      for (size_t j = 0; j < g.conv.size(); ++j) g.conv[j] = load_scalar(cv.dtype, cv.data, j);
      g.dt_bias = vec(a + "dt_bias", Hv);
      g.a_log = vec(a + "A_log", Hv);
      g.norm = vec(a + "norm.weight", cfg_.lin_v_dim);
    } else {
      const std::string a = p + "self_attn.";
      const int64_t hd = cfg_.head_dim;
      AttnWeights& w = L.attn;
      w.q = matrix(a + "q_proj", 2 * cfg_.n_heads * hd, D, 4);
      w.k = matrix(a + "k_proj", cfg_.n_kv_heads * hd, D, 4);
      w.v = matrix(a + "v_proj", cfg_.n_kv_heads * hd, D, 4);
      w.o = matrix(a + "o_proj", D, cfg_.n_heads * hd, 4);
      w.q_norm = norm_1p(a + "q_norm.weight", hd);
      w.k_norm = norm_1p(a + "k_norm.weight", hd);
    }
    const std::string m = p + "mlp.";
    L.moe.router = matrix(m + "gate", cfg_.n_experts, D, 8);
    L.moe.shared_expert_gate = matrix(m + "shared_expert_gate", 1, D, 8);
    L.moe.shared_gate = matrix(m + "shared_expert.gate_proj", cfg_.shared_inter, D, 4);
    L.moe.shared_up = matrix(m + "shared_expert.up_proj", cfg_.shared_inter, D, 4);
    L.moe.shared_down = matrix(m + "shared_expert.down_proj", D, cfg_.shared_inter, 4);
    experts(m, L.moe);
    return L;
  }

  const TensorStore& st_;
  ModelWeights& mw_;
  const ModelConfig& cfg_;
  WeightMode mode_;
  std::string prefix_;
  bool mlx_ = false;
  std::set<std::string> used_;
};

}  // namespace

namespace {

// Bytes of a layer's attention or GDN block, router and shared expert, plus
// `n_experts` routed experts.
size_t layer_bytes(const LayerWeights& L, size_t n_experts) {
  size_t b = 0;
  if (L.type == LayerType::linear_attention)
    b += L.gdn.in_qkv.bytes() + L.gdn.in_z.bytes() + L.gdn.in_b.bytes() + L.gdn.in_a.bytes() +
         L.gdn.out.bytes();
  else
    b += L.attn.q.bytes() + L.attn.k.bytes() + L.attn.v.bytes() + L.attn.o.bytes();
  const MoeWeights& m = L.moe;
  b += m.router.bytes() + m.shared_expert_gate.bytes() + m.shared_gate.bytes() +
       m.shared_up.bytes() + m.shared_down.bytes();
  return b + n_experts * (m.gate[0].bytes() + m.up[0].bytes() + m.down[0].bytes());
}

}  // namespace

size_t ModelWeights::active_bytes_per_token() const {
  size_t b = lm_head.bytes() + embed.row_bytes();
  for (const LayerWeights& L : layers) b += layer_bytes(L, size_t(cfg.top_k));
  return b;
}

size_t ModelWeights::total_weight_bytes() const {
  size_t b = embed.bytes() + (cfg.tie_embeddings ? 0 : lm_head.bytes());
  for (const LayerWeights& L : layers) b += layer_bytes(L, size_t(cfg.n_experts));
  return b;
}

std::shared_ptr<ModelWeights> load_model(const std::string& dir, WeightMode mode, Residency r) {
  if (!fs::is_directory(dir)) fail("checkpoint folder {} does not exist", dir);
  auto mw = std::make_shared<ModelWeights>();
  mw->cfg = load_config((fs::path(dir) / "config.json").string());
  mw->store = std::make_unique<TensorStore>(dir, r);
  Loader(*mw->store, *mw, mode).load();
  spdlog::info("loaded {} ({} layout, {} layers, {:.2f} GB of weights{})", dir, mw->layout,
               mw->cfg.n_layers, double(mw->total_weight_bytes()) / 1e9,
               mode == WeightMode::q4 ? ", 4-bit" : "");
  return mw;
}

}  // namespace tern
