// Writes a checkpoint of this architecture in the Hugging Face bf16 layout or
// the MLX 4-bit layout from any source of logical weights. make-dummy (random
// weights) and convert (weights of a loaded checkpoint) are the two sources.
//
// Logical weights follow the Hugging Face conventions: matrices [out, in],
// fused experts gate_up [E, 2I, D] and down [E, D, I], conv [C, K]; except that
// zero-centred norms are given as their multiplier (1 + w).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "checkpoint/config.h"

namespace tern {

enum class Role { matrix, router, embedding, norm_1p, gated_norm, conv, a_log, dt_bias, experts };

struct LogicalTensor {
  std::string name;  // Hugging Face name without the prefix, e.g. "layers.0.mlp.gate.weight"
  Role role = Role::matrix;
  int64_t stack = 0;  // experts: number of experts; 0 otherwise
  int64_t rows = 0, cols = 0;
  bool residual_out = false;  // output projection of a residual branch (small init)
};

std::vector<LogicalTensor> logical_tensors(const ModelConfig& cfg);

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Rows [r0, r0 + n) of `t` seen as a [stack * rows, cols] matrix (a vector
  // is one row), as floats.
  virtual void rows(const LogicalTensor& t, int64_t r0, int64_t n, float* out) const = 0;
};

enum class Layout { hf, mlx4 };
Layout layout_from_name(const std::string& s);

// Writes config.json (from `config_json`, adding the quantisation block for
// mlx4) and the weights into `dir`.
void write_checkpoint(const nlohmann::json& config_json, const WeightSource& src, Layout layout,
                      const std::string& dir);

}  // namespace tern
