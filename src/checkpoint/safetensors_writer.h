// Writing safetensors checkpoints tensor by tensor, so that a 20 GB checkpoint
// never sits in memory: each tensor is produced by a fill function into a
// buffer of its own size and appended to its shard.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace tern {

struct PlannedTensor {
  std::string name;
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;
  std::function<void(uint8_t* dst)> fill;  // writes exactly nbytes()
  size_t nbytes() const;
};

// Writes `model.safetensors`, or `model-0000i-of-0000N.safetensors` shards of at
// most `max_shard_bytes` plus `model.safetensors.index.json`. Tensors are
// written in the given order, which must keep each aligned to its element size.
void write_safetensors(const std::string& dir, std::vector<PlannedTensor> tensors,
                       size_t max_shard_bytes);

}  // namespace tern
