// The affine quantiser and the packed-row expansion.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/quant.h"
#include "core/bf16.h"
#include "test_util.h"

namespace tern {

TEST(Quant, PackingIsLsbFirst) {
  // Codes 0..15 then 15..0 over one group of 64 (values are exact in bf16).
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[size_t(i)] = float(i % 16);
  std::vector<uint32_t> packed(8);
  std::vector<uint16_t> s(1), b(1);
  quantize_row(w.data(), 64, 4, 64, packed.data(), s.data(), b.data());
  EXPECT_EQ(bf16_to_f32(s[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(b[0]), 0.0f);
  EXPECT_EQ(packed[0], 0x76543210u);
  EXPECT_EQ(packed[1], 0xfedcba98u);
}

TEST(Quant, RoundTripErrorWithinHalfStep) {
  for (int bits : {4, 8}) {
    const int64_t rows = 7, cols = 256;
    std::vector<uint16_t> storage;
    QTensor d = test::random_bf16_matrix(rows, cols, 11 + bits, 1.0f, storage);
    std::vector<float> w(storage.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(storage[i]);
    QuantBuffer qb = quantize_matrix(d, bits, 64);
    QTensor q = qb.view(rows, cols, bits, 64);
    EXPECT_EQ(q.bytes(), size_t(rows * cols * bits / 8 + rows * (cols / 64) * 4));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      q.dequant_row(r, row.data());
      for (int64_t g = 0; g < cols / 64; ++g) {
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < 64; ++j) {
          lo = std::min(lo, w[size_t(r * cols + g * 64 + j)]);
          hi = std::max(hi, w[size_t(r * cols + g * 64 + j)]);
        }
        // Half a step, plus the bf16 rounding of scale and bias.
        const float step = (hi - lo) / float((1 << bits) - 1);
        const float tol = 0.5f * step + (std::abs(lo) + (hi - lo)) * (1.0f / 128);
        for (int j = 0; j < 64; ++j) {
          const size_t i = size_t(g * 64 + j);
          EXPECT_NEAR(row[i], w[size_t(r * cols) + i], tol) << "bits " << bits;
        }
      }
    }
    // A slice of rows expands to the same values.
    QTensor s = q.row_slice(3, 2);
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    s.dequant_row(1, a.data());
    q.dequant_row(4, b.data());
    EXPECT_EQ(a, b);
  }
}

TEST(Quant, ConstantGroup) {
  std::vector<float> w(64, 0.5f), out(64);
  std::vector<uint32_t> packed(8);
  std::vector<uint16_t> s(1), b(1);
  quantize_row(w.data(), 64, 4, 64, packed.data(), s.data(), b.data());
  QuantBuffer qb{packed, s, b};
  qb.view(1, 64, 4, 64).dequant_row(0, out.data());
  EXPECT_EQ(out, w);
}

}  // namespace tern
