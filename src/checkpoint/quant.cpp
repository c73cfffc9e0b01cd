#include "checkpoint/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tern {

float load_scalar(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return f16_to_f32(h);
    }
    case DType::f32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    default:
      break;
  }
  TERN_CHECK(false);
  return 0;
}

size_t QTensor::row_bytes() const {
  return fmt == WFormat::dense ? size_t(cols) * dtype_size(dtype) : size_t(cols) * bits / 8;
}

size_t QTensor::bytes() const {
  size_t b = row_bytes() * size_t(rows);
  if (fmt == WFormat::affine) b += 2 * groups_per_row() * size_t(rows) * dtype_size(dtype);
  return b;
}

std::array<std::span<const uint8_t>, 3> QTensor::storage() const {
  if (empty()) return {};
  if (!quantized() || packed16) return {std::span(data, bytes()), {}, {}};
  const size_t params = size_t(rows) * groups_per_row() * dtype_size(dtype);
  return {std::span(data, size_t(rows) * row_bytes()), std::span(scales, params),
          std::span(biases, params)};
}

void QTensor::dequant_row(int64_t r, float* out) const {
  if (packed16) fail("a matrix repacked for the fast CPU backend's kernels has no plain rows");
  if (fmt == WFormat::dense) {
    const uint8_t* row = data + size_t(r) * row_bytes();
    if (dtype == DType::bf16) {
      const auto* h = reinterpret_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_f32(h[i]);
    } else {
      for (int64_t i = 0; i < cols; ++i) out[i] = load_scalar(dtype, row, size_t(i));
    }
    return;
  }
  const auto* words = reinterpret_cast<const uint32_t*>(data + size_t(r) * row_bytes());
  const size_t g0 = size_t(r) * groups_per_row();
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (size_t g = 0; g < groups_per_row(); ++g) {
    const float s = load_scalar(dtype, scales, g0 + g);
    const float b = load_scalar(dtype, biases, g0 + g);
    const uint32_t* w = words + g * size_t(group) / per_word;
    float* o = out + g * size_t(group);
    for (int j = 0; j < group; ++j) {
      uint32_t q = (w[j / per_word] >> (bits * (j % per_word))) & mask;
      o[j] = s * float(q) + b;
    }
  }
}

QTensor QTensor::row_slice(int64_t begin, int64_t n) const {
  TERN_CHECK(begin >= 0 && begin + n <= rows);
  QTensor t = *this;
  t.rows = n;
  if (packed16) {  // whole blocks of 16 rows, bytes() per row the same
    TERN_CHECK(begin % 16 == 0 && n % 16 == 0);
    t.data = data + size_t(begin) * (bytes() / size_t(rows));
    return t;
  }
  t.data = data + size_t(begin) * row_bytes();
  if (fmt == WFormat::affine) {
    size_t off = size_t(begin) * groups_per_row() * dtype_size(dtype);
    t.scales = scales + off;
    t.biases = biases + off;
  }
  return t;
}

void quantize_row(const float* w, int64_t cols, int bits, int group, uint32_t* packed,
                  uint16_t* scales_bf16, uint16_t* biases_bf16) {
  const int per_word = 32 / bits;
  const float max_q = float((1 << bits) - 1);
  std::fill(packed, packed + cols / per_word, 0u);
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* x = w + g * group;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < group; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    float scale = (hi - lo) / max_q;
    if (scale == 0.0f) scale = 1.0f;
    scales_bf16[g] = f32_to_bf16(scale);
    biases_bf16[g] = f32_to_bf16(lo);
    const float s = bf16_to_f32(scales_bf16[g]), b = bf16_to_f32(biases_bf16[g]);
    for (int j = 0; j < group; ++j) {
      float q = std::nearbyint((x[j] - b) / s);  // ties to even (default rounding mode)
      q = std::clamp(q, 0.0f, max_q);
      int64_t i = g * group + j;
      packed[i / per_word] |= uint32_t(q) << (bits * (i % per_word));
    }
  }
}

QTensor QuantBuffer::view(int64_t rows, int64_t cols, int bits, int group) const {
  QTensor t;
  t.fmt = WFormat::affine;
  t.dtype = DType::bf16;
  t.rows = rows;
  t.cols = cols;
  t.bits = bits;
  t.group = group;
  t.data = reinterpret_cast<const uint8_t*>(packed.data());
  t.scales = reinterpret_cast<const uint8_t*>(scales.data());
  t.biases = reinterpret_cast<const uint8_t*>(biases.data());
  return t;
}

QuantBuffer quantize_matrix(const QTensor& dense, int bits, int group) {
  TERN_CHECK(dense.fmt == WFormat::dense && dense.cols % group == 0);
  QuantBuffer qb;
  const size_t words = size_t(dense.cols) * bits / 32, groups = size_t(dense.cols / group);
  qb.packed.resize(words * size_t(dense.rows));
  qb.scales.resize(groups * size_t(dense.rows));
  qb.biases.resize(groups * size_t(dense.rows));
  ThreadPool::global().parallel_for(size_t(dense.rows), 16, [&](size_t b, size_t e, int) {
    std::vector<float> row(size_t(dense.cols));
    for (size_t r = b; r < e; ++r) {
      dense.dequant_row(int64_t(r), row.data());
      quantize_row(row.data(), dense.cols, bits, group, &qb.packed[r * words],
                   &qb.scales[r * groups], &qb.biases[r * groups]);
    }
  });
  return qb;
}

}  // namespace tern
