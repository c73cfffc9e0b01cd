// Weight matrices as tern keeps them: dense (bf16/f16/f32, as in the file) or
// affine group-quantised (MLX layout: uint32 words of 4- or 8-bit codes, least
// significant first, with one scale and bias per group of `group` inputs:
// w = scale * q + bias). Rows are expanded only on the fly, a row at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "checkpoint/safetensors.h"

namespace tern {

enum class WFormat { dense, affine };

struct QTensor {
  WFormat fmt = WFormat::dense;
  DType dtype = DType::bf16;  // dense: element type; affine: type of scales and biases
  int64_t rows = 0, cols = 0;
  int bits = 0, group = 0;  // affine only
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  // Affine 4- or 8-bit, group 64, bf16 scales repacked for the fast CPU
  // backend's 4-bit kernels (backends/cpu/pack16.h): rows in blocks of 16,
  // each group of a block one record of codes, scales and biases in `data`
  // (`scales`, `biases` null). Only those kernels read it; dequant_row fails.
  bool packed16 = false;

  bool empty() const { return data == nullptr; }
  bool quantized() const { return fmt == WFormat::affine; }
  size_t row_bytes() const;  // bytes of `data` per row
  size_t groups_per_row() const { return size_t(cols / group); }
  // Bytes read to use the whole matrix once (data + scales + biases).
  size_t bytes() const;
  // Where those bytes are: data, then (quantised, not packed16) scales and
  // biases; empty spans for what the matrix does not have.
  std::array<std::span<const uint8_t>, 3> storage() const;
  void dequant_row(int64_t r, float* out) const;
  // Rows [begin, begin + n) as a matrix of their own (a view, no copy).
  QTensor row_slice(int64_t begin, int64_t n) const;
};

float load_scalar(DType t, const uint8_t* p, size_t i);

// Quantises one row with the project's affine quantiser (bit-exact with
// tools/reference/make_golden.py): per group lo/hi, scale = (hi-lo)/(2^bits-1),
// scale and bias=lo rounded to bf16, codes = round-half-even((w-bias)/scale).
void quantize_row(const float* w, int64_t cols, int bits, int group, uint32_t* packed,
                  uint16_t* scales_bf16, uint16_t* biases_bf16);

// Owned storage for a quantised matrix (stacked matrices are rows of one).
struct QuantBuffer {
  std::vector<uint32_t> packed;
  std::vector<uint16_t> scales, biases;
  QTensor view(int64_t rows, int64_t cols, int bits, int group) const;
};

QuantBuffer quantize_matrix(const QTensor& dense, int bits, int group);

}  // namespace tern
