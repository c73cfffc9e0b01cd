// Reading and writing float32 .npy files (NumPy format 1.0, C order).
#pragma once

#include <string>
#include <vector>

namespace tern {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<float> data;
};

void write_npy_f32(const std::string& path, const std::vector<size_t>& shape, const float* data);
NpyArray read_npy_f32(const std::string& path);

}  // namespace tern
