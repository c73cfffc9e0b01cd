// The model's weights on the GPU, uploaded once and kept 4-bit (8-bit router),
// the GEMVs' matrices in the tile layout (layout.h), with the load-time
// stacking the decode kernels want: GDN [qkv; z; b; a],
// attention [q; k; v], router [gate; shared_expert_gate], and the shared
// expert appended to the expert stacks as expert n_experts. Built from a
// loaded checkpoint or, for tern bench --dummy, from random bytes on the GPU.
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/layout.h"
#include "checkpoint/weights.h"

namespace tern::cuda {

struct DevLayer {
  LayerType type = LayerType::linear_attention;
  float *in_norm = nullptr, *post_norm = nullptr;
  DMat in_proj, out;  // GDN
  float *conv = nullptr, *dt_bias = nullptr, *a_log = nullptr, *gnorm = nullptr;
  DMat qkv, o;  // attention
  float *q_norm = nullptr, *k_norm = nullptr;
  DMat router, gate_up, down;  // MoE
};

class DeviceWeights {
 public:
  static std::unique_ptr<DeviceWeights> upload(const ModelWeights& w);
  static std::unique_ptr<DeviceWeights> random(const ModelConfig& c, uint64_t seed);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  ModelConfig cfg;
  DMat embed, lm_head;
  float* final_norm = nullptr;
  float* rope_inv_freq = nullptr;  // [rotary_dim / 2] (model/rope.h)
  std::vector<DevLayer> layers;

  size_t total_bytes() const { return bytes_; }
  // Weight bytes read per decoded token (routed top-k + shared experts, lm_head).
  size_t active_bytes_per_token() const;

 private:
  DeviceWeights() = default;
  static std::unique_ptr<DeviceWeights> empty(const ModelConfig& c);
  void* alloc(size_t bytes);
  DMat alloc_mat(int rows, int cols, int bits);
  float* alloc_vec(size_t n);
  // Moves m (MLX layout, tileable) into the tile layout the tensor-core GEMVs
  // read (layout.h); pair as for to_tiles.
  void to_tile_layout(DMat& m, int pair);
  // Every matrix the tensor-core paths read, into the tile layout.
  void tile_matrices();
  std::vector<void*> ptrs_;
  size_t bytes_ = 0;
};

// Checks that the config has the shapes the kernels are written for.
void check_supported(const ModelConfig& c);

}  // namespace tern::cuda
