// tern convert: a Hugging Face bf16 checkpoint to the MLX 4-bit layout (same
// tensor names, packing and config entries as the mlx-community conversions).
#pragma once

#include <string>

namespace tern {

void convert_checkpoint(const std::string& in_dir, const std::string& out_dir);

}  // namespace tern
