// The model's weights in memory, whatever the checkpoint layout: Hugging Face
// (official `model.language_model.` names or the text-only `model.` variant;
// fused 3-D or per-expert experts) or MLX (affine 4/8-bit, switch_mlp stacks,
// baked 1+w norms). Matrices stay views into the mmap-ed files unless a bf16
// checkpoint is quantised at load (WeightMode::q4). Norm vectors are stored as
// the multiplier the forward pass applies: (1 + w) for the zero-centred norms.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/config.h"
#include "checkpoint/quant.h"
#include "checkpoint/safetensors.h"

namespace tern {

enum class WeightMode { q4, bf16 };
WeightMode weight_mode_from_name(const std::string& s);

struct GdnWeights {
  QTensor in_qkv, in_z, in_b, in_a, out;
  std::vector<float> conv;  // [channels][kernel], tap kernel-1 is the current token
  std::vector<float> dt_bias, a_log, norm;
};

struct AttnWeights {
  QTensor q, k, v, o;
  std::vector<float> q_norm, k_norm;
};

struct MoeWeights {
  QTensor router, shared_expert_gate;
  QTensor shared_gate, shared_up, shared_down;
  std::vector<QTensor> gate, up, down;  // one per expert
};

struct LayerWeights {
  LayerType type = LayerType::linear_attention;
  std::vector<float> in_norm, post_norm;
  GdnWeights gdn;
  AttnWeights attn;
  MoeWeights moe;

  // f(QTensor&) for every matrix of the layer's type (L: this, const or not).
  template <class L, class F>
  static void for_each_matrix(L& l, F&& f) {
    if (l.type == LayerType::linear_attention)
      for (auto* t : {&l.gdn.in_qkv, &l.gdn.in_z, &l.gdn.in_b, &l.gdn.in_a, &l.gdn.out}) f(*t);
    else
      for (auto* t : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o}) f(*t);
    auto& m = l.moe;
    for (auto* t : {&m.router, &m.shared_expert_gate, &m.shared_gate, &m.shared_up, &m.shared_down})
      f(*t);
    for (auto* v : {&m.gate, &m.up, &m.down})
      for (auto& t : *v) f(t);
  }
};

struct ModelWeights {
  ModelConfig cfg;
  std::string layout;  // "hf" or "mlx", as detected
  QTensor embed, lm_head;
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::vector<std::string> skipped;  // tensors present but not used (vision, MTP)

  std::unique_ptr<TensorStore> store;
  std::deque<QuantBuffer> owned;      // matrices quantised at load
  std::deque<WeightBuffer> repacked;  // matrices repacked for a backend's kernels

  // Bytes of weights read per decoded token (active experts only, lm_head included).
  size_t active_bytes_per_token() const;
  size_t total_weight_bytes() const;
};

std::shared_ptr<ModelWeights> load_model(const std::string& dir, WeightMode mode,
                                         Residency r = Residency::mapped);

}  // namespace tern
