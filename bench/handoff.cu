// Hand-off micro-benchmark: what a decode kernel pays between its producer's
// end and having the producer's vector staged. A producer of 128 blocks writes
// a 4096-float vector (32 floats a block, as the GEMV epilogues write their
// rows), and a consumer of 132 blocks of 512 threads (the tile GEMV's shape)
// waits for it by PDL and reads 2048 floats of it (as a K = 2048 GEMV block
// stages its whole input). The producer may write R replicas and consumer
// block b read replica b % R: with R = 1 all 132 SMs ask for the same L2 lines
// at once. Then the consumer runs the tile GEMVs' staging instead (tile::stage
// as each decode GEMV calls it): its cost after the wait with no other traffic
// on the GPU. 40 pairs in one CUDA graph, replayed 20 times; globaltimer
// stamps per block, the read or staging as warp 0 finishes it.
//
//   cmake --build build --target handoff && build/handoff (or nvcc -O3
//   -std=c++17 -arch=sm_90a -I src bench/handoff.cu -o handoff)
#include <cuda_runtime.h>

#include "backends/cuda/tile_mma.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kN = 4096, kProducers = 128, kConsumers = 132, kThreads = 512, kPairs = 40,
              kReplays = 20, kMaxReplicas = 132;

struct Stamp {
  unsigned long long start, waited, read, end;
};

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

__global__ void producer(float* x, int replicas, float v, Stamp* st) {
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int i = blockIdx.x * 32 + threadIdx.x;
  for (int r = 0; r < replicas; ++r) x[size_t(r) * kN + i] = v + float(i);
  __syncthreads();
  if (threadIdx.x == 0) st[blockIdx.x] = {t0, 0, 0, now()};
}

__global__ void consumer(const float* x, int replicas, float* out, Stamp* st) {
  __shared__ float red[kThreads / 32];
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long tw = now();
  const float4 v =
      reinterpret_cast<const float4*>(x + size_t(blockIdx.x % replicas) * kN)[threadIdx.x];
  float s = v.x + v.y + v.z + v.w;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  const unsigned long long tr = now();
  if (threadIdx.x == 0) {
    float t = 0;
    for (float r : red) t += r;
    out[blockIdx.x] = t;
    st[blockIdx.x] = {t0, tw, tr, now()};
  }
}

// mode 1: the RMSNorm'd input at K = 2048 (a round a warp); 2: the gated norm
// at K = 4096 (two rounds a warp, groups of 128). Stamped when warp 0's
// staging is done.
__global__ void stager(const float* x, const float* gate, const float* norm, int mode,
                       tern::cuda::FastDiv per, float* out, Stamp* st) {
  namespace tile = tern::cuda::tile;
  extern __shared__ float sm[];
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long tw = now();
  float* red = nullptr;
  tile::Staged xs;
  switch (mode) {
    case 1:  // gdn_in, qkv: RMSNorm'd
      xs = tile::stage<tile::Prep::norm>(x, 2048, {.norm = norm, .eps = 1e-6f}, sm, &red,
                                         tile::warp_cols<1>(16));
      break;
    case 2:  // gdn_out: gated norm
      xs = tile::stage<tile::Prep::gated>(
          x, 4096, {.norm = norm, .eps = 1e-6f, .norm_group = 128, .gate = gate}, sm, &red,
          tile::warp_cols<2>(32));
      break;
    case 3:  // plain, K = 2048
      xs = tile::stage<tile::Prep::plain>(x, 2048, {}, sm, &red, tile::warp_cols<1>(16));
      break;
    case 4:  // o_proj: plain, K = 4096
      xs = tile::stage<tile::Prep::plain>(x, 4096, {}, sm, &red, tile::warp_cols<2>(32));
      break;
    default:  // down: K = 4096 weighted a 512-column slot (8 slots here), 3 rounds a warp
      xs = tile::stage<tile::Prep::weighted>(x, 4096, {.weight = gate, .per_weight = per}, sm, &red,
                                             tile::warp_cols<3>(32));
  }
  const unsigned long long tr = now();
  if (threadIdx.x == 0) {
    out[blockIdx.x] = xs.scale[0] + xs.xsum[0];
    st[blockIdx.x] = {t0, tw, tr, now()};
  }
}

template <typename... P, typename... A>
void launch(void (*k)(P...), int grid, int block, size_t smem, cudaStream_t s, A... a) {
  cudaLaunchConfig_t c = {};
  c.gridDim = grid, c.blockDim = block, c.stream = s, c.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at, c.numAttrs = 1;
  cudaLaunchKernelEx(&c, k, a...);
}

const char* const kStageNames[] = {"stage norm 2K", "stage gated 4K", "stage plain 2K",
                                   "stage plain 4K", "stage wts 4K"};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  float *x, *out;
  Stamp *ps, *cs;
  cudaMalloc(&x, sizeof(float) * kN * kMaxReplicas);
  float *gate, *norm;
  cudaMalloc(&gate, sizeof(float) * kN);
  cudaMalloc(&norm, sizeof(float) * kN);
  {
    std::vector<float> h(kN);
    for (int i = 0; i < kN; ++i) h[size_t(i)] = 0.5f + float(i % 7) * 0.1f;
    cudaMemcpy(gate, h.data(), sizeof(float) * kN, cudaMemcpyHostToDevice);
    cudaMemcpy(norm, h.data(), sizeof(float) * kN, cudaMemcpyHostToDevice);
  }
  cudaMalloc(&out, sizeof(float) * kConsumers);
  cudaMalloc(&ps, sizeof(Stamp) * kPairs * kProducers);
  cudaMalloc(&cs, sizeof(Stamp) * kPairs * kConsumers);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t stage_smem = tern::cuda::tile::stage_bytes(kN, 0);
  cudaFuncSetAttribute(stager, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stage_smem));
  std::printf(
      "case            wait after the last producer end (us)  read (us, median / max over "
      "blocks)\n");
  // R > 0: the plain read from replica b % R; R < 0: staging mode -R.
  for (int R : {1, 8, -1, -2, -3, -4, -5}) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int p = 0; p < kPairs; ++p) {
      launch(producer, kProducers, 32, 0, s, x, std::max(R, 1), float(p), ps + p * kProducers);
      if (R > 0)
        launch(consumer, kConsumers, kThreads, 0, s, static_cast<const float*>(x), R, out,
               cs + p * kConsumers);
      else
        launch(stager, kConsumers, kThreads, stage_smem, s, static_cast<const float*>(x),
               static_cast<const float*>(gate), static_cast<const float*>(norm), -R,
               tern::cuda::FastDiv(512 / 8), out, cs + p * kConsumers);
    }
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    std::vector<double> wait, read_med, read_max;
    for (int rep = 0; rep < kReplays; ++rep) {
      cudaGraphLaunch(ge, s);
      cudaStreamSynchronize(s);
      std::vector<Stamp> hp(kPairs * kProducers), hc(kPairs * kConsumers);
      cudaMemcpy(hp.data(), ps, hp.size() * sizeof(Stamp), cudaMemcpyDeviceToHost);
      cudaMemcpy(hc.data(), cs, hc.size() * sizeof(Stamp), cudaMemcpyDeviceToHost);
      for (int p = 2; p < kPairs; ++p) {
        unsigned long long last = 0;
        for (int b = 0; b < kProducers; ++b) last = std::max(last, hp[p * kProducers + b].end);
        std::vector<double> w, r;
        for (int b = 0; b < kConsumers; ++b) {
          const Stamp& c = hc[p * kConsumers + b];
          w.push_back((double(c.waited) - double(last)) / 1e3);
          r.push_back(double(c.read - c.waited) / 1e3);
        }
        wait.push_back(median(w));
        read_med.push_back(median(r));
        read_max.push_back(*std::max_element(r.begin(), r.end()));
      }
    }
    std::printf("%-14s  %10.3f  %10.3f / %.3f\n",
                R < 0 ? kStageNames[-R - 1] : ("replicas " + std::to_string(R)).c_str(),
                median(wait), median(read_med), median(read_max));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
