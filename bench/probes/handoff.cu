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
// The other cases measure what a step without PDL's grid-wide hand-off would
// pay: the consumer polling flags the producer blocks release (per block, one
// count, per warp), the producer bringing bytes into L2 at its end (does the
// dependent's wait wait for them?), a hand-off among the 8 blocks of a
// cluster through DSMEM, and producers reducing 2048 floats each into one
// vector by atomics (split-K's reduction) before the consumer reads it.
// The side-branch cases add L2 prefetches from a kernel outside the chain (a
// branch of the graph forked before each producer): does a hand-off wait for
// them too?
//
//   (-DTERN_PROBES=ON) cmake --build build --target handoff && build/handoff (or nvcc -O3
//   -std=c++17 -arch=sm_90a -I src bench/probes/handoff.cu -o handoff)
#include <cooperative_groups.h>
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
  return tern::cuda::global_ns();
}

// flags: a word a block, or (count) one word all blocks add to; the block
// publishes `epoch` there once its part is written (after its end stamp, so a
// flag's cost counts against the consumer).
// ahead: bytes a block brings into L2 (cp.async.bulk.prefetch.L2) after its
// end stamp, from `far` (whether the dependent's PDL wait waits for them).
// reduce (before its end stamp): 1, every block adds 2048 floats into x
// (red.add.f32, as split-K blocks would reduce a vector); 2, every block
// stores 2048 floats to its own row of `far` (the same bytes, no reduction);
// 3, red.add.u64 of 2^-32 fixed point into `far`.
__global__ void producer(float* x, int replicas, float v, Stamp* st, unsigned* flags, bool count,
                         unsigned epoch, uint8_t* far, unsigned ahead, int reduce) {
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int i = blockIdx.x * 32 + threadIdx.x;
  for (int r = 0; r < replicas; ++r) x[size_t(r) * kN + i] = v + float(i);
  for (int d = int(threadIdx.x); reduce > 0 && d < 2048; d += 32) {
    const float u = v + 1e-3f * float(d + blockIdx.x);
    if (reduce == 1)
      atomicAdd(x + d, u);
    else if (reduce == 2)
      reinterpret_cast<float*>(far)[size_t(blockIdx.x) * 2048 + d] = u;
    else
      atomicAdd(reinterpret_cast<unsigned long long*>(far) + d,
                static_cast<unsigned long long>(__float2ll_rn(u * 0x1p32f)));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    st[blockIdx.x] = {t0, 0, 0, now()};
    if (ahead > 0)
      asm volatile(
          "cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(far + size_t(blockIdx.x) * ahead),
          "r"(ahead)
          : "memory");
    if (flags != nullptr) {
      __threadfence();
      if (count)
        atomicAdd(flags, 1u);
      else
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flags + blockIdx.x), "r"(epoch)
                     : "memory");
    }
  }
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The consumer without the PDL wait: it starts beside the producer (PDL
// launches it once every producer block has started) and polls flags instead.
//   mode 0: threads 0..127 each poll a producer's flag, then a block barrier;
//   mode 1: thread 0 polls the count (128 * epoch), then a block barrier;
//   mode 2: each warp polls just the flags of the 4 producers of its 128
//           floats (lanes 0-3) and reads as soon as they are set; `waited` is
//           warp 0's;
//   mode 3: as 2, then the warp stages its columns (plain, K = 2048).
// `read` is stamped when the whole block has its floats.
__global__ void flag_consumer(const float* x, const unsigned* flags, int mode, unsigned epoch,
                              float* out, Stamp* st) {
  __shared__ float red[kThreads / 32];
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  if (mode == 0) {
    if (t < kProducers)
      while (ld_acquire(flags + t) < epoch) {
      }
    __syncthreads();
  } else if (mode == 1) {
    if (t == 0)
      while (ld_acquire(flags) < epoch * kProducers) {
      }
    __syncthreads();
  } else {  // modes 2 and 3
    if (lane < 4)
      while (ld_acquire(flags + 4 * warp + lane) < epoch) {
      }
    __syncwarp();
  }
  const unsigned long long tw = now();
  if (mode == 3) {  // the warp stages its columns as a K = 2048 plain GEMV block does
    namespace tile = tern::cuda::tile;
    extern __shared__ float sm[];
    float* scratch = nullptr;
    const tile::Staged xs =
        tile::stage<tile::Prep::plain>(x, 2048, {}, sm, &scratch, tile::warp_cols<1>(16));
    __syncthreads();
    const unsigned long long tr = now();
    if (t == 0) {
      out[blockIdx.x] = xs.scale[0] + xs.xsum[0];
      st[blockIdx.x] = {t0, tw, tr, now()};
    }
    return;
  }
  const float4 v = __ldcg(reinterpret_cast<const float4*>(x) + t);
  float s = v.x + v.y + v.z + v.w;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  const unsigned long long tr = now();
  if (t == 0) {
    float sum = 0;
    for (float r : red) sum += r;
    out[blockIdx.x] = sum;
    st[blockIdx.x] = {t0, tw, tr, now()};
  }
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

// The hand-off inside a kernel, among the 8 blocks of a cluster (as a GEMV
// whose blocks are clustered by the rows a later step needs would do it):
// each block writes its 32 floats into its shared memory and stamps
// `waited`, the cluster barrier, then every block reads all 8 blocks' floats
// through DSMEM and stamps `read`.
constexpr int kCluster = 8;
__global__ void __cluster_dims__(kCluster, 1, 1) cluster_exchange(float v, Stamp* st) {
  namespace cg = cooperative_groups;
  __shared__ float mine[32], red[kThreads / 32];
  const cg::cluster_group cluster = cg::this_cluster();
  const int t = int(threadIdx.x);
  const unsigned long long t0 = now();
  if (t < 32) mine[t] = v + float(blockIdx.x * 32 + t);
  __syncthreads();
  const unsigned long long tw = now();
  cluster.sync();
  float s = 0.0f;
  if (t < kCluster * 32) s = cluster.map_shared_rank(mine, t / 32)[t % 32];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((t & 31) == 0) red[t >> 5] = s;
  __syncthreads();
  const unsigned long long tr = now();
  cluster.sync();  // no block leaves while another reads its shared memory
  if (t == 0) st[blockIdx.x] = {t0, tw, tr, now() + unsigned(red[0] == -1.0f)};
}

// A side branch's prefetch: `bytes` at p into L2 from 32 blocks of one
// warp, 256 KB a bulk prefetch (as the step-graph side branch measured in
// docs/kernels/cuda-decode.md, Tried and lost, did).
__global__ void side_prefetch(const uint8_t* p, size_t bytes) {
  const size_t per = bytes / gridDim.x / 16 * 16, b0 = per * blockIdx.x;
  constexpr size_t kPiece = 256 * 1024;
  for (size_t o = threadIdx.x * kPiece; o < per; o += blockDim.x * kPiece)
    tern::cuda::bulk_prefetch_l2(p + b0 + o, unsigned(per - o < kPiece ? per - o : kPiece));
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
const char* const kReduceNames[] = {"2K red.f32 each", "2K stores each", "2K red.u64 each"};
const char* const kFlagNames[] = {"flags, all", "flag count", "flags, warp", "flags, stage 2K"};

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
  unsigned* flags;
  cudaMalloc(&flags, sizeof(unsigned) * kProducers);
  // Far bytes for the producers' L2 prefetches: a fresh range each pair.
  constexpr size_t kAheadMax = 16u << 20;
  uint8_t* far;
  cudaMalloc(&far, kAheadMax * kPairs);
  cudaMalloc(&ps, sizeof(Stamp) * kPairs * kProducers);
  cudaMalloc(&cs, sizeof(Stamp) * kPairs * kConsumers);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t stage_smem = tern::cuda::tile::stage_bytes(kN, 0);
  cudaFuncSetAttribute(stager, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stage_smem));
  cudaFuncSetAttribute(flag_consumer, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stage_smem));
  std::printf(
      "case            wait after the last producer end (us)  read (us, median / max over "
      "blocks)  read done after the last producer end (us, median / max)\n");
  // R > 0: the plain read from replica b % R; R < 0: staging mode -R; R >=
  // 100: the read after flags, flag_consumer's mode R - 100 (the flags zeroed
  // at the graph's start, pair p's epoch p + 1).
  // R = 200 + m: replicas 8 with the producers bringing m MB into L2 at their
  // end.
  // R = 300 + m: replicas 1 with the producers' reduce mode m.
  // R = 400 + m: replicas 8 with a side branch forked before each producer
  // bringing m MB (a fresh range) into L2 (m = 0: the branch, 16 bytes).
  cudaStream_t side;
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaEvent_t fork, join;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  for (int R : {1,   8,   -1,  -2,  -3,  -4,  -5,  100, 101, 102, 103, 200, 202,
                204, 208, 216, 300, 301, 302, 303, 400, 402, 404, 408, 416}) {
    const int side_mb = R >= 400 ? R - 400 : -1;
    if (R >= 400) R = 8;
    const bool flagged = R >= 100 && R < 200;
    const unsigned ahead =
        R >= 200 && R < 300 ? unsigned((size_t(R - 200) << 20) / kProducers) / 16 * 16 : 0;
    const int reduce = R >= 300 ? R - 300 : 0;
    if (R >= 200) R = R >= 300 ? 1 : 8;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (flagged) cudaMemsetAsync(flags, 0, sizeof(unsigned) * kProducers, s);
    for (int p = 0; p < kPairs; ++p) {
      if (side_mb >= 0) {
        cudaEventRecord(fork, s);
        cudaStreamWaitEvent(side, fork);
        side_prefetch<<<32, 32, 0, side>>>(far + kAheadMax * p,
                                           side_mb > 0 ? size_t(side_mb) << 20 : 32 * 16);
      }
      launch(producer, kProducers, 32, 0, s, x, flagged ? 1 : std::max(R, 1), float(p),
             ps + p * kProducers, flagged ? flags : nullptr, R == 101, unsigned(p + 1),
             reduce > 0 ? far : far + kAheadMax * p, ahead, reduce);
      if (flagged)
        launch(flag_consumer, kConsumers, kThreads, stage_smem, s, static_cast<const float*>(x),
               static_cast<const unsigned*>(flags), R - 100, unsigned(p + 1), out,
               cs + p * kConsumers);
      else if (R > 0)
        launch(consumer, kConsumers, kThreads, 0, s, static_cast<const float*>(x), R, out,
               cs + p * kConsumers);
      else
        launch(stager, kConsumers, kThreads, stage_smem, s, static_cast<const float*>(x),
               static_cast<const float*>(gate), static_cast<const float*>(norm), -R,
               tern::cuda::FastDiv(512 / 8), out, cs + p * kConsumers);
    }
    if (side_mb >= 0) {
      cudaEventRecord(join, side);
      cudaStreamWaitEvent(s, join);
    }
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    std::vector<double> wait, read_med, read_max, done_med, done_max;
    for (int rep = 0; rep < kReplays; ++rep) {
      cudaGraphLaunch(ge, s);
      cudaStreamSynchronize(s);
      std::vector<Stamp> hp(kPairs * kProducers), hc(kPairs * kConsumers);
      cudaMemcpy(hp.data(), ps, hp.size() * sizeof(Stamp), cudaMemcpyDeviceToHost);
      cudaMemcpy(hc.data(), cs, hc.size() * sizeof(Stamp), cudaMemcpyDeviceToHost);
      for (int p = 2; p < kPairs; ++p) {
        unsigned long long last = 0;
        for (int b = 0; b < kProducers; ++b) last = std::max(last, hp[p * kProducers + b].end);
        std::vector<double> w, r, d;
        for (int b = 0; b < kConsumers; ++b) {
          const Stamp& c = hc[p * kConsumers + b];
          w.push_back((double(c.waited) - double(last)) / 1e3);
          r.push_back(double(c.read - c.waited) / 1e3);
          d.push_back((double(c.read) - double(last)) / 1e3);
        }
        done_med.push_back(median(d));
        done_max.push_back(*std::max_element(d.begin(), d.end()));
        wait.push_back(median(w));
        read_med.push_back(median(r));
        read_max.push_back(*std::max_element(r.begin(), r.end()));
      }
    }
    std::printf(
        "%-14s  %10.3f  %10.3f / %.3f  %10.3f / %.3f\n",
        flagged        ? kFlagNames[R - 100]
        : reduce > 0   ? kReduceNames[reduce - 1]
        : side_mb >= 0 ? ("r8, side " + std::to_string(side_mb) + " MB").c_str()
        : ahead > 0    ? ("r8, " + std::to_string(ahead * kProducers >> 20) + " MB ahead").c_str()
        : R < 0        ? kStageNames[-R - 1]
                       : ("replicas " + std::to_string(R)).c_str(),
        median(wait), median(read_med), median(read_max), median(done_med), median(done_max));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  {
    // The cluster hand-off: the barrier and DSMEM read after the cluster's last
    // write (median / max over blocks, median over launches).
    std::vector<double> med, mx;
    for (int rep = 0; rep < kReplays * kPairs; ++rep) {
      cluster_exchange<<<128, kThreads, 0, s>>>(float(rep), cs);
      cudaStreamSynchronize(s);
      std::vector<Stamp> hc(128);
      cudaMemcpy(hc.data(), cs, hc.size() * sizeof(Stamp), cudaMemcpyDeviceToHost);
      std::vector<double> d;
      for (int b = 0; b < 128; ++b) {
        unsigned long long last = 0;
        for (int k = b / kCluster * kCluster; k < (b / kCluster + 1) * kCluster; ++k)
          last = std::max(last, hc[size_t(k)].waited);
        d.push_back((double(hc[size_t(b)].read) - double(last)) / 1e3);
      }
      med.push_back(median(d));
      mx.push_back(*std::max_element(d.begin(), d.end()));
    }
    std::printf("%-14s  %10s  %10s   %10.3f / %.3f\n", "cluster of 8", "-", "-", median(med),
                median(mx));
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
