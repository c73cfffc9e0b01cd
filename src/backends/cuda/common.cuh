// Small device helpers shared by the CUDA kernels: error checks, bf16 loads and
// pairs, the bf16 tensor-core mma, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace tern::cuda {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float bf(const __nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Two floats as a bf16 pair (round to nearest), lo in the low half.
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// d += a . b on the tensor cores: mma m16n8k16, bf16 operands, fp32 sums.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The scale and the bias of a DMat::sb word.
__device__ __forceinline__ float sb_scale(uint32_t sb) {
  return __uint_as_float(sb << 16);
}
__device__ __forceinline__ float sb_bias(uint32_t sb) {
  return __uint_as_float(sb & 0xffff0000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* scratch /* [32] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nw ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// Is this block the last of the `arrivals` blocks counting on `counter` to get
// here? Call after the block's global writes; the last block then sees every
// counted block's. The counter resets itself, so a captured graph can replay.
__device__ inline bool last_block(unsigned* counter, unsigned arrivals) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == arrivals - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  __threadfence();
  return last;
}

// Is this block the last of the grid to get here?
__device__ inline bool last_block(unsigned* counter) {
  return last_block(counter, gridDim.x);
}

// The step's token choice handed to the next step (arg-max and sampler alike):
// its input token, the output ring, and the step and position counters.
template <typename Args>
__device__ void hand_off(const Args& a, int token) {
  *a.token = token;
  a.out[*a.step & a.out_mask] = token;
  *a.step += 1;
  *a.pos += 1;
}

// Programmatic dependent launch (KERNELS.md §7.3): every decode kernel lets the
// next one start at once (pdl_launch_dependents) and waits for the previous
// one's results (pdl_wait) only after issuing what does not depend on them,
// such as L2 prefetches of its weights.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;");
}
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

// Asynchronous copies into shared memory (cp.async): a thread waits only for
// its own groups, so data a thread copies and reads back itself needs no
// barrier. `valid` false zero-fills the destination.
// 16 bytes into shared memory (dst and src 16-aligned), the first `bytes` (0, 4, 8 or
// 16) from src and the rest zeros.
__device__ __forceinline__ void cp_async16_fill(void* dst, const void* src, int bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes));
}
// 8 bytes (dst and src 8-aligned), the first `bytes` (0, 4 or 8) from src and the rest zeros.
__device__ __forceinline__ void cp_async8_fill(void* dst, const void* src, int bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid = true) {
  cp_async16_fill(dst, src, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src));
}
// n floats (a multiple of 4, both 16-byte aligned) from src to dst by the
// block's threads, a 16-byte piece each at a time (not committed).
__device__ __forceinline__ void cp_async_floats(float* dst, const float* src, int n) {
  for (int i = 4 * int(threadIdx.x); i < n; i += 4 * int(blockDim.x)) cp_async16(dst + i, src + i);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Bulk copies (the TMA engine, one instruction per contiguous piece, each
// issued by one thread) into shared memory, completing on an mbarrier: one
// thread arms the barrier with the copies' total bytes (before or after they
// are issued), the block's threads wait for the phase to flip.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(bar)));
}
// Makes the barriers' initialisation visible to the bulk-copy engine.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src
// to shared dst, evicted first from L2 (weights are read once a step).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "{ .reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1], %2, [%3], pol; }" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Brings `bytes` (a multiple of 16, 16-byte aligned) at src into L2 (the
// TMA engine; one thread, nothing to wait for).
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// The GPU-wide nanosecond clock (%globaltimer), for the trace and the
// micro-benchmarks; the memory clobber keeps the compiler from moving loads
// across a stamp.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// Shared-memory classes that place the decode blocks: a wide block (over half
// an SM's shared memory) never shares an SM with another wide one, and a narrow
// block (over half of what a wide one leaves) fits once beside a wide one. The
// tile GEMVs are wide, the kernels between them narrow, so a kernel's blocks
// spread one an SM and the next kernel's blocks start beside them and load
// early (bench/probes/membench.cu measures what loading early is worth:
// bench/results/membench.txt).
constexpr size_t kWideSmem = 150 * 1024, kNarrowSmem = 60 * 1024;
// The most a narrow block may take beside a wide one (1 KB reserved a block,
// up to 4 KB of static shared memory).
constexpr size_t kMaxNarrowSmem = 228 * 1024 - kWideSmem - 6 * 1024;
// The most one block may take (an SM's 228 KB less the 1 KB reserved).
constexpr size_t kMaxSmem = 227 * 1024;

// n / d and n % d by a multiply, for 0 <= n, d < 2^16 and d fixed at launch
// (made on the host): m = ceil(2^32 / d), so n m / 2^32 is n / d plus less
// than n / 2^32 <= 1 / d, which never reaches the next integer. An integer
// division is ~20 dependent instructions, and the decode kernels are
// issue-bound.
struct FastDiv {
  uint32_t d = 1;
  uint64_t m = 1ull << 32;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor), m(((1ull << 32) + divisor - 1) / divisor) {}
  __device__ __forceinline__ int div(int n) const { return int((uint64_t(uint32_t(n)) * m) >> 32); }
  __device__ __forceinline__ int mod(int n) const { return n - div(n) * int(d); }
};

// Launches a kernel that may overlap the previous kernel of the stream (it
// must call pdl_wait before touching that kernel's outputs).
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t st, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // The whole 228 KB of an SM as shared memory for every kernel: a smaller
  // carveout picked for one kernel would keep the next one's blocks off the
  // SMs it runs on (see kWideSmem).
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

// By the fast exp and division (a few ulp; the IEEE forms cost ~20
// instructions each, and the decode kernels are bound by issue slots, not bytes).
// Large |x| come out right: exp overflows to inf and x / inf to 0.
__device__ __forceinline__ float sigmoidf(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}
__device__ __forceinline__ float siluf(float x) {
  return __fdividef(x, 1.0f + __expf(-x));
}

}  // namespace tern::cuda
