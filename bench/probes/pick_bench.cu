// The experts' pick (pick.cuh) alone: cycles a pick of the top 8 of 256
// logits in one warp, against a variant (a max tree a round, slower: kept here
// as measured), on 4096 logit sets with and without ties; both must choose the
// same experts.
//
//   (-DTERN_PROBES=ON) cmake --build build --target pick_bench && build/pick_bench
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "backends/cuda/pick.cuh"

namespace {

using tern::cuda::Choice;
using tern::cuda::kFull;

// A variant measured and not kept: the lane's largest key by a max tree
// (depth log2 N) and N independent compares for its lowest slot holding the
// warp's, instead of a dependent chain of compare-selects.
template <int N>
__device__ Choice pick_tree(const float* l, int E, int top_k) {
  const int lane = threadIdx.x & 31;
  unsigned key[N];
  tern::cuda::expert_keys(l, E, key);
  Choice c{0, 0.0f};
  for (int t = 0; t < top_k; ++t) {
    unsigned m[N];
#pragma unroll
    for (int i = 0; i < N; ++i) m[i] = key[i];
#pragma unroll
    for (int w = N / 2; w > 0; w /= 2)
#pragma unroll
      for (int i = 0; i < w; ++i) m[i] = max(m[i], m[i + w]);
    const unsigned top = __reduce_max_sync(kFull, m[0]);
    unsigned hit = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) hit |= key[i] == top ? 1u << i : 0u;
    const unsigned mine = hit != 0 && top != 0 ? unsigned(lane + 32 * (__ffs(hit) - 1)) : ~0u;
    const unsigned id = __reduce_min_sync(kFull, mine);
    if (lane == t) c.id = int(id), c.logit = l[id];
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (unsigned(lane + 32 * i) == id) key[i] = 0u;
  }
  return c;
}

constexpr int kE = 256, kK = 8, kSets = 4096;

template <bool kTree>
__global__ void run(const float* logits, int* ids, long long* cycles) {
  __shared__ float p[kE];
  long long total = 0;
  for (int s = 0; s < kSets; ++s) {
    for (int e = int(threadIdx.x); e < kE; e += 32) p[e] = logits[size_t(s) * kE + e];
    __syncwarp();
    const long long t0 = clock64();
    const Choice c = kTree ? pick_tree<8>(p, kE, kK) : tern::cuda::pick_experts<8>(p, kE, kK);
    if (int(threadIdx.x) < kK) ids[s * kK + int(threadIdx.x)] = c.id;
    __syncwarp();
    total += clock64() - t0;
    __syncwarp();
  }
  if (threadIdx.x == 0) *cycles = total;
}

}  // namespace

int main() {
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> l(size_t(kSets) * kE);
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = nd(g);
    if (i / kE % 2 == 1) l[i] = float(int(l[i] * 2.0f)) / 2.0f;  // every other set tied
  }
  float* dl;
  int* dids;
  long long* dc;
  cudaMalloc(&dl, l.size() * sizeof(float));
  cudaMalloc(&dids, 2 * sizeof(int) * kSets * kK);
  cudaMalloc(&dc, 2 * sizeof(long long));
  cudaMemcpy(dl, l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice);
  for (int rep = 0; rep < 2; ++rep) {  // the first a warm-up
    run<false><<<1, 32>>>(dl, dids, dc);
    run<true><<<1, 32>>>(dl, dids + kSets * kK, dc + 1);
  }
  std::vector<int> ids(2 * size_t(kSets) * kK);
  long long c[2];
  cudaMemcpy(ids.data(), dids, ids.size() * sizeof(int), cudaMemcpyDeviceToHost);
  cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost);
  int differ = 0;
  for (size_t i = 0; i < size_t(kSets) * kK; ++i) differ += ids[i] != ids[i + size_t(kSets) * kK];
  std::printf("top-%d of %d, %d sets: pick_experts %.0f cycles a pick, tree %.0f; %d ids differ\n",
              kK, kE, kSets, double(c[0]) / kSets, double(c[1]) / kSets, differ);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess && differ == 0 ? 0 : 1;
}
