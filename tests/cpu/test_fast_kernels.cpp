// The fast CPU backend's kernels against the reference on fresh random inputs,
// for every instruction set this CPU runs (the portable baseline always), at
// the model's sizes (2048 hidden, 512 expert width, 4096 value width, 128- and
// 256-wide heads) and at odd ones (groups left over after the 4-group blocks,
// a single group, rows and tokens not multiples of the kernels' tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <utility>

#include "backends/cpu/kernels.h"
#include "backends/cpu/moe_layer.h"
#include "backends/cpu/pack16.h"
#include "core/thread_pool.h"
#include "model/delta_reference.h"
#include "model/moe.h"
#include "test_util.h"

namespace tern::cpu {

namespace {

struct Codes {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  QRows rows(int64_t cols, const int32_t* index = nullptr) const {
    return {q.data(), d.data(), s.data(), cols, index};
  }
};

Codes quantize_rows(const Kernels& k, const std::vector<float>& x, int64_t T, int64_t cols) {
  Codes c{std::vector<int8_t>(size_t(T * cols)), std::vector<float>(size_t(T * cols / 64)),
          std::vector<float>(size_t(T * cols / 64))};
  for (int64_t t = 0; t < T; ++t)
    k.quantize(&x[size_t(t * cols)], cols, &c.q[size_t(t * cols)], &c.d[size_t(t * cols / 64)],
               &c.s[size_t(t * cols / 64)]);
  return c;
}

// Inputs with an outlier every 97 values, as activations have.
std::vector<float> activations(size_t n, uint64_t seed) {
  std::vector<float> x = test::random_vector(n, seed);
  for (size_t i = 0; i < n; i += 97) x[i] *= 8.0f;
  return x;
}

// w repacked into the 16-row records (pack16.h), held in `records`.
QTensor packed_copy(const QTensor& w, std::vector<uint8_t>& records) {
  records.resize(w.bytes());
  pack16(w, records.data());
  QTensor p = w;
  p.data = records.data();
  p.scales = p.biases = nullptr;
  p.packed16 = true;
  return p;
}

std::string isa_label(const testing::TestParamInfo<Isa>& p) {
  return isa_name(p.param);
}

}  // namespace

class FastKernels : public testing::TestWithParam<Isa> {
 protected:
  const Kernels& k() const { return kernels(GetParam()); }
};

TEST_P(FastKernels, QuantizeRoundsEachInputToNearestInAPermutedLayout) {
  for (int64_t cols : {64, 192, 256, 320, 2048, 4160}) {
    const int64_t G = cols / 64;
    std::vector<int64_t> seen(size_t(cols), 0);
    for (int64_t g = 0; g < G; ++g)
      for (int i = 0; i < 64; ++i) ++seen[size_t(code_offset(G, g, i))];
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int64_t n) { return n == 1; })) << cols;
    const std::vector<float> x = activations(size_t(cols), uint64_t(cols));
    const Codes c = quantize_rows(k(), x, 1, cols);
    const Codes p = quantize_rows(kernels(Isa::portable), x, 1, cols);
    EXPECT_EQ(c.q, p.q) << "codes differ from the portable kernel's";
    for (int64_t g = 0; g < G; ++g) {
      float amax = 0;
      double sum = 0, mag = 0;
      for (int i = 0; i < 64; ++i) {
        amax = std::max(amax, std::abs(x[size_t(g * 64 + i)]));
        sum += x[size_t(g * 64 + i)];
        mag += std::abs(x[size_t(g * 64 + i)]);
      }
      EXPECT_EQ(c.d[size_t(g)], amax / 127.0f);
      EXPECT_NEAR(c.s[size_t(g)], sum, 1e-6 * mag);  // fp32 sums of 64 in 8 lanes
      EXPECT_EQ(c.s[size_t(g)], p.s[size_t(g)]);
      for (int i = 0; i < 64; ++i) {
        const float v = x[size_t(g * 64 + i)], q = c.q[size_t(code_offset(G, g, i))];
        EXPECT_LE(std::abs(q), 127.0f);
        EXPECT_LE(std::abs(q * c.d[size_t(g)] - v), 0.5f * c.d[size_t(g)] * (1 + 1e-5f));
      }
    }
  }
}

struct MatmulShape {
  int64_t rows, cols, T;
};

// gemm_q4 on gathered input rows, scaled and accumulated output rows, against
// (a) the exact integer formula of the same codes, in double: 1e-5 of the
// sum of the terms' magnitudes (fp32 accumulation of <= 64 terms a group); and
// (b) the dequantised weights times the fp32 inputs, in double: the int8
// rounding bound sum_g d_g / 2 * sum_i |w_i| (each code is within d/2).
// Every table is held to the same bounds on the repacked matrix (rows a
// multiple of 16; groups in 4-group blocks and after), and on 8-bit matrices
// (the routers) repacked. Each case runs on random codes, then on the largest:
// every weight code 15 (255) and every input code +-127, the sign alternating
// by group, where the AVX2 kernels' 16-bit sums peak (8 products of 15 * 127).
TEST_P(FastKernels, Q4MatmulMatchesTheReference) {
  const MatmulShape shapes[] = {{64, 2048, 1},
                                {64, 2048, 4},
                                {67, 2048, 9},
                                {48, 512, 7},
                                {16, 4096, 2},
                                {37, 192, 5},
                                {29, 320, 6},
                                {17, 64, 3},
                                {33, 1280, 16},
                                {32, 320, 3},
                                {16, 192, 9},
                                {48, 1280, 1},
                                {16, 64, 3},
                                {32, 128, 5},
                                // many tokens (the amx table's tiles): token and row
                                // tails, no whole block, a chunk of 128 and more
                                {40, 2048, 37},
                                {37, 192, 20},
                                {29, 320, 130},
                                {32, 320, 130},
                                {100, 4096, 17},
                                {70, 512, 12},
                                {64, 1024, 32}};
  int packed_cases = 0;
  // 8 bits: the routers, packed only
  for (const auto& [bits, largest] : {std::pair{4, false}, {8, false}, {4, true}, {8, true}})
    for (const MatmulShape& sh : shapes) {
      const int64_t rows = sh.rows, cols = sh.cols, T = sh.T, G = cols / 64;
      std::vector<uint16_t> storage;
      QTensor d = test::random_bf16_matrix(rows, cols, uint64_t(rows + cols), 0.05f, storage);
      QuantBuffer qb = quantize_matrix(d, bits, 64);
      SCOPED_TRACE(largest ? "the largest codes" : "random codes");
      if (largest) std::ranges::fill(qb.packed, ~0u);
      const QTensor w = qb.view(rows, cols, bits, 64);
      // Input row t is row index[t] of 2T quantised rows; output row t is row
      // out_index[t] of T + 1, times scale[t], added to what was there.
      std::vector<float> x = activations(size_t(2 * T * cols), uint64_t(T * cols));
      if (largest)
        for (size_t i = 0; i < x.size(); ++i) x[i] = i / 64 % 2 ? -1.0f : 1.0f;
      const Codes c = quantize_rows(k(), x, 2 * T, cols);
      std::vector<int32_t> index(static_cast<size_t>(T)), out_index(static_cast<size_t>(T));
      std::vector<float> scale(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        index[size_t(t)] = int32_t((3 * t + 1) % (2 * T));
        out_index[size_t(t)] = int32_t(T - t);
        scale[size_t(t)] = 0.5f + float(t);
      }
      const std::vector<float> before = test::random_vector(size_t((T + 1) * rows), 3);
      std::vector<uint8_t> records;
      auto check = [&](const QTensor& m, int64_t split, const char* layout) {
        std::vector<float> y = before;
        const OutRows o{y.data(), rows, out_index.data(), scale.data(), true};
        // two calls: row ranges need not start at 0
        k().gemm_q4(m, 0, split, c.rows(cols, index.data()), T, o);
        k().gemm_q4(m, split, rows, c.rows(cols, index.data()), T, o);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          w.dequant_row(r, row.data());
          for (int64_t t = 0; t < T; ++t) {
            const int64_t xr = index[size_t(t)];
            double exact = 0, magnitude = 0, ref = 0, bound = 0;
            for (int64_t g = 0; g < G; ++g) {
              const double s = load_scalar(w.dtype, w.scales, size_t(r * G + g));
              const double b = load_scalar(w.dtype, w.biases, size_t(r * G + g));
              const double dx = c.d[size_t(xr * G + g)], sx = c.s[size_t(xr * G + g)];
              int64_t isum = 0;
              double wabs = 0;
              for (int i = 0; i < 64; ++i) {
                const int64_t e = g * 64 + i;
                const uint8_t* row_codes = w.data + size_t(r) * w.row_bytes();
                const int q = bits == 8 ? row_codes[e]
                              : e % 2   ? row_codes[e / 2] >> 4
                                        : row_codes[e / 2] & 15;
                isum += q * c.q[size_t(xr * cols + code_offset(G, g, i))];
                ref += double(row[size_t(e)]) * x[size_t(xr * cols + e)];
                wabs += std::abs(row[size_t(e)]);
              }
              exact += s * dx * double(isum) + b * sx;
              magnitude += std::abs(s * dx * double(isum)) + std::abs(b * sx);
              bound += dx / 2 * wabs;
            }
            const double st = scale[size_t(t)];
            const float was = before[size_t(out_index[size_t(t)] * rows + r)];
            const double got = y[size_t(out_index[size_t(t)] * rows + r)] - was;
            EXPECT_NEAR(got, st * exact, st * 1e-5 * magnitude + 1e-5 * std::abs(was))
                << layout << " " << rows << "x" << cols << " T=" << T << " r=" << r << " t=" << t;
            EXPECT_NEAR(got, st * ref, st * (bound + 1e-5 * magnitude) + 1e-5 * std::abs(was))
                << layout << " " << rows << "x" << cols << " T=" << T << " r=" << r << " t=" << t;
          }
        }
      };
      if (bits == 4) check(w, rows / 3, "plain");
      if (packable(w)) {
        check(packed_copy(w, records), rows / 3 / kPackRows * kPackRows,
              bits == 8 ? "packed16 8-bit" : "packed16");
        ++packed_cases;
      }
    }
  EXPECT_EQ(packed_cases, 44);
}

// gemm_f32 for the formats gemm_q4 does not take (8-bit router, dense bf16,
// 4-bit in groups of 32): within 1e-5 of the double reference (fp32 sums).
TEST_P(FastKernels, F32MatmulMatchesTheReferenceForOtherFormats) {
  struct Case {
    int64_t rows, cols, T;
    int bits, group;  // bits 0: dense bf16
  };
  for (const Case& cs : {Case{256, 2048, 1, 8, 64}, Case{256, 2048, 5, 8, 64},
                         Case{37, 192, 3, 0, 0}, Case{20, 96, 2, 4, 32}}) {
    std::vector<uint16_t> storage;
    QTensor d = test::random_bf16_matrix(cs.rows, cs.cols, 11, 0.05f, storage);
    QuantBuffer qb;
    QTensor w = d;
    if (cs.bits) {
      qb = quantize_matrix(d, cs.bits, cs.group);
      w = qb.view(cs.rows, cs.cols, cs.bits, cs.group);
    }
    const std::vector<float> x = activations(size_t(cs.T * cs.cols), 5);
    std::vector<float> y(size_t(cs.T * cs.rows)), row(static_cast<size_t>(cs.cols));
    k().gemm_f32(w, 0, cs.rows, {x.data(), cs.cols, nullptr}, cs.T, {y.data(), cs.rows});
    for (int64_t r = 0; r < cs.rows; ++r) {
      w.dequant_row(r, row.data());
      for (int64_t t = 0; t < cs.T; ++t) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < cs.cols; ++i) {
          ref += double(row[size_t(i)]) * x[size_t(t * cs.cols + i)];
          mag += std::abs(double(row[size_t(i)]) * x[size_t(t * cs.cols + i)]);
        }
        EXPECT_NEAR(y[size_t(t * cs.rows + r)], ref, 1e-5 * mag) << cs.bits << " r=" << r;
      }
    }
  }
}

// A decode step over several sequences (Backend::step) relies on it: a call
// over T tokens computes each token's row bit for bit as a call of that token
// alone, whatever T (up to the table's alone_tokens) and in every weight
// format, plain and repacked, the 4-bit and the fp32 kernels; outputs scaled
// and added to what is there, as the MoE's down projections are.
TEST_P(FastKernels, MatmulsComputeEachTokenAsAlone) {
  struct Case {
    int64_t rows, cols;
    int bits, group;  // bits 0: dense bf16
  };
  const int64_t most = std::min<int64_t>(17, k().alone_tokens);
  for (const Case& cs : {Case{48, 2048, 4, 64}, Case{37, 192, 4, 64}, Case{64, 320, 8, 64},
                         Case{20, 96, 4, 32}, Case{37, 192, 0, 0}}) {
    std::vector<uint16_t> storage;
    QTensor w = test::random_bf16_matrix(cs.rows, cs.cols, uint64_t(cs.rows), 0.05f, storage);
    QuantBuffer qb;
    if (cs.bits) {
      qb = quantize_matrix(w, cs.bits, cs.group);
      w = qb.view(cs.rows, cs.cols, cs.bits, cs.group);
    }
    std::vector<uint8_t> records;
    std::vector<QTensor> layouts = {w};
    if (packable(w)) layouts.push_back(packed_copy(w, records));
    const std::vector<float> x = activations(size_t(most * cs.cols), uint64_t(cs.cols + cs.bits));
    const Codes c = quantize_rows(k(), x, most, cs.cols);
    const std::vector<float> before = test::random_vector(size_t(most * cs.rows), 3);
    const std::vector<float> scale = test::random_vector(size_t(most), 4);
    for (const QTensor& m : layouts)
      for (int64_t T = 1; T <= most; ++T) {
        auto run = [&](int64_t t0, int64_t n, float* y) {
          const OutRows o{y, cs.rows, nullptr, scale.data() + t0, true};
          if (gemm_q4_takes(m)) {
            const Codes one{{c.q.begin() + t0 * cs.cols, c.q.end()},
                            {c.d.begin() + t0 * cs.cols / 64, c.d.end()},
                            {c.s.begin() + t0 * cs.cols / 64, c.s.end()}};
            k().gemm_q4(m, 0, cs.rows, one.rows(cs.cols), n, o);
          } else {
            k().gemm_f32(m, 0, cs.rows, {x.data() + t0 * cs.cols, cs.cols, nullptr}, n, o);
          }
        };
        std::vector<float> together = before, alone = before;
        together.resize(size_t(T * cs.rows));
        alone.resize(size_t(T * cs.rows));
        run(0, T, together.data());
        for (int64_t t = 0; t < T; ++t) run(t, 1, alone.data() + t * cs.rows);
        EXPECT_EQ(together, alone) << cs.rows << "x" << cs.cols << " bits " << cs.bits
                                   << (m.packed16 ? " packed16" : "") << " T=" << T;
      }
  }
}

// silu(s) * m through the vectorised exp, on [-100, 100] (past the clamp at
// both ends) and at a length that leaves a tail, in place on either input and
// without m: 4 ulp of the double result (exp within 2 ulp, a divide, a multiply).
TEST_P(FastKernels, SiluMulMatchesTheReference) {
  std::vector<float> s = test::random_vector(1003, 1, 30.0f), m = test::random_vector(1003, 2);
  s[0] = -100.0f;
  s[1] = 100.0f;
  s[2] = 0.0f;
  for (int mode = 0; mode < 3; ++mode) {  // out = s, out = m, no m
    std::vector<float> out = mode == 1 ? m : s;
    k().silu_mul(mode == 1 ? s.data() : out.data(),
                 mode == 2   ? nullptr
                 : mode == 1 ? out.data()
                             : m.data(),
                 out.data(), int64_t(out.size()));
    for (size_t i = 0; i < s.size(); ++i) {
      const double want = double(s[i]) / (1.0 + std::exp(-double(s[i]))) * (mode == 2 ? 1.0 : m[i]);
      EXPECT_NEAR(out[i], want, 4.8e-7 * std::abs(want) + 1e-30)
          << "s=" << s[i] << " mode " << mode;
    }
  }
}

// Both delta-rule forms against the double reference (the reference kernels'
// own bound: fp32 state over up to 150 tokens), at the model's 128 x 128 heads
// and at widths that leave columns after the 32-column blocks.
TEST_P(FastKernels, DeltaRuleFormsMatchTheReference) {
  struct Case {
    int64_t T;
    int dk, dv;
  };
  for (const Case& cs : {Case{1, 128, 128}, Case{5, 128, 128}, Case{64, 128, 128},
                         Case{65, 128, 128}, Case{150, 128, 128}, Case{70, 24, 40}}) {
    model::DeltaInputs in = model::delta_inputs(cs.T, cs.dk, cs.dv, uint64_t(cs.T + cs.dv));
    const std::vector<float> S0 = test::random_vector(size_t(cs.dk * cs.dv), 99, 0.1f);
    std::vector<double> Sref(S0.begin(), S0.end());
    const std::vector<double> ref = model::delta_reference(in, cs.T, cs.dk, cs.dv, Sref);
    for (bool chunked : {false, true}) {
      std::vector<float> S = S0, o(size_t(cs.T * cs.dv));
      const DeltaArgs a{in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                        cs.T,        cs.dk,       cs.dv,       S.data(),    o.data()};
      (chunked ? k().delta_chunked : k().delta_recurrent)(a);
      double err = 0, scale = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        err = std::max(err, std::abs(o[i] - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
      }
      for (size_t i = 0; i < S.size(); ++i) err = std::max(err, std::abs(S[i] - Sref[i]));
      EXPECT_LT(err, 1e-4 * (1 + scale))
          << "T=" << cs.T << " dv=" << cs.dv << (chunked ? " chunked" : " recurrent");
    }
  }
}

// Causal attention of 8 query heads on one KV head (the model's GQA group of
// head dim 256, the tiny dummy's 2, and an odd one), the keys in ranges merged
// as the attention layer merges them, against a double softmax over the
// visible keys: 1e-5. Up to 16 rows (queries x heads) take the direct loops,
// more the GEMMs.
TEST_P(FastKernels, AttentionMatchesADirectSoftmax) {
  struct Case {
    int heads, hd;
    int64_t nq, pos0, splits;
  };
  for (const Case& cs : {Case{8, 256, 1, 0, 1}, Case{8, 256, 1, 300, 3}, Case{8, 256, 17, 0, 1},
                         Case{8, 256, 5, 70, 2}, Case{3, 40, 9, 130, 4}, Case{2, 256, 16, 200, 1},
                         Case{2, 256, 3, 90, 2}, Case{3, 40, 2, 50, 2}}) {
    const int64_t n_keys = cs.pos0 + cs.nq, hd = cs.hd, H = cs.heads;
    const std::vector<float> q = test::random_vector(size_t(cs.nq * H * hd), 1, 0.2f);
    const std::vector<float> kk = test::random_vector(size_t(n_keys * hd), 2);
    const std::vector<float> v = test::random_vector(size_t(n_keys * hd), 3);
    const float scale = 1.0f / std::sqrt(float(hd));
    const size_t rows = size_t(cs.nq * H);
    std::vector<float> m(rows * size_t(cs.splits)), l(m.size()), o(m.size() * size_t(hd)),
        scratch(attn_scratch_floats(H, cs.nq, cs.hd));
    const int64_t per = (n_keys + cs.splits - 1) / cs.splits;
    for (int64_t s = 0; s < cs.splits; ++s)
      k().attention({q.data(), H * hd, hd, cs.heads, cs.hd, cs.nq, cs.pos0, kk.data(), v.data(), hd,
                     s * per, std::min(n_keys, (s + 1) * per), scale, &m[rows * size_t(s)],
                     &l[rows * size_t(s)], &o[rows * size_t(s * hd)], scratch.data()});
    for (int64_t i = 0; i < cs.nq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const size_t row = size_t(i * H + h);
        std::vector<double> p(static_cast<size_t>(cs.pos0 + i + 1));
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j < p.size(); ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double(q[size_t(i * H * hd + h * hd + d)]) * kk[j * size_t(hd) + size_t(d)];
          mx = std::max(mx, p[j] = dot * scale);
        }
        for (double& x : p) sum += x = std::exp(x - mx);
        double M = -INFINITY;
        for (int64_t s = 0; s < cs.splits; ++s) M = std::max<double>(M, m[rows * size_t(s) + row]);
        for (int64_t d = 0; d < hd; ++d) {
          double ref = 0, num = 0, den = 0;
          for (size_t j = 0; j < p.size(); ++j) ref += p[j] / sum * v[j * size_t(hd) + size_t(d)];
          for (int64_t s = 0; s < cs.splits; ++s) {
            const double f = std::exp(m[rows * size_t(s) + row] - M);
            num += f * o[(rows * size_t(s) + row) * size_t(hd) + size_t(d)];
            den += f * l[rows * size_t(s) + row];
          }
          EXPECT_NEAR(num / den, ref, 1e-5) << "nq=" << cs.nq << " i=" << i << " h=" << h;
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FastKernels, testing::ValuesIn(supported_isas()), isa_label);

// The fast router picks the reference's experts with the reference's weights,
// bit for bit, ties included (logits on a coarse grid tie often).
TEST(FastRoute, MatchesTheReference) {
  for (const auto& [E, K, grid] :
       {std::tuple{256, 8, 0.0f}, std::tuple{256, 8, 0.25f}, std::tuple{16, 4, 0.5f}}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      std::vector<float> logits = test::random_vector(size_t(E), seed, 2.0f);
      if (grid > 0)
        for (float& x : logits) x = std::round(x / grid) * grid;
      for (bool renorm : {true, false}) {
        const model::Route r = model::route_token(logits.data(), E, K, renorm);
        std::vector<int32_t> experts(static_cast<size_t>(K));
        std::vector<float> weights(static_cast<size_t>(K));
        route(logits.data(), E, K, renorm, experts.data(), weights.data());
        EXPECT_EQ(std::vector<int32_t>(r.experts.begin(), r.experts.end()), experts);
        EXPECT_EQ(r.weights, weights);
      }
    }
  }
}

TEST(ThreadPool, RunsEveryItemOnceOnEveryThreadCount) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(1000)}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_thread{0};
        pool.run(n, [&](size_t i, int t) {
          hits[i].fetch_add(1);
          if (t < 0 || t >= pool.size()) bad_thread.fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n;
        EXPECT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

// The chunked delta rule's underflowing decays are ~10x slower as denormals:
// items run with them flushed to zero, and the caller's mode comes back after.
TEST(ThreadPool, ItemsFlushDenormalsAndTheCallersModeIsRestored) {
#if defined(__x86_64__) || defined(__aarch64__)
  const auto product = [] {
    volatile float a = 1e-30f, b = 1e-10f;  // 1e-40: a denormal
    return a * b;
  };
  ASSERT_GT(product(), 0.0f);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::atomic<int> kept{0};
    pool.run(64, [&](size_t, int) {
      if (product() != 0.0f) kept.fetch_add(1);
    });
    EXPECT_EQ(kept.load(), 0) << threads;
    EXPECT_GT(product(), 0.0f) << threads;
  }
#else
  GTEST_SKIP() << "no denormal flushing on this architecture";
#endif
}

}  // namespace tern::cpu
