// The delta rule's test inputs and its plain double-precision reference
// (docs/model.md §DeltaNet), shared by the reference's and the fast backend's kernel tests.
#pragma once

#include <cmath>
#include <vector>

#include "model/ops.h"
#include "test_util.h"

namespace tern::model {

struct DeltaInputs {
  std::vector<float> q, k, v, g, beta;
};

inline DeltaInputs delta_inputs(int64_t T, int dk, int dv, uint64_t seed) {
  DeltaInputs in{
      test::random_vector(size_t(T * dk), seed), test::random_vector(size_t(T * dk), seed + 1),
      test::random_vector(size_t(T * dv), seed + 2), test::random_vector(size_t(T), seed + 3),
      test::random_vector(size_t(T), seed + 4)};
  for (int64_t t = 0; t < T; ++t) {
    for (auto* x : {&in.q, &in.k}) {
      double ss = 0;
      for (int i = 0; i < dk; ++i) ss += std::pow((*x)[size_t(t * dk + i)], 2);
      for (int i = 0; i < dk; ++i) (*x)[size_t(t * dk + i)] /= float(std::sqrt(ss));
    }
    in.g[size_t(t)] = -std::abs(in.g[size_t(t)]) * 0.5f;  // log-decay <= 0
    in.beta[size_t(t)] = sigmoid(in.beta[size_t(t)]);
  }
  return in;
}

// The delta rule exactly as docs/model.md §DeltaNet writes it, in double.
inline std::vector<double> delta_reference(const DeltaInputs& in, int64_t T, int dk, int dv,
                                           std::vector<double>& S) {
  std::vector<double> o(size_t(T * dv));
  for (int64_t t = 0; t < T; ++t) {
    const double alpha = std::exp(double(in.g[size_t(t)]));
    for (double& s : S) s *= alpha;
    for (int j = 0; j < dv; ++j) {
      double r = 0;
      for (int i = 0; i < dk; ++i) r += S[size_t(i * dv + j)] * in.k[size_t(t * dk + i)];
      const double u = in.beta[size_t(t)] * (in.v[size_t(t * dv + j)] - r);
      for (int i = 0; i < dk; ++i) S[size_t(i * dv + j)] += in.k[size_t(t * dk + i)] * u;
    }
    for (int j = 0; j < dv; ++j)
      for (int i = 0; i < dk; ++i)
        o[size_t(t * dv + j)] += S[size_t(i * dv + j)] * in.q[size_t(t * dk + i)];
  }
  return o;
}

}  // namespace tern::model
