// chunk_state: the chunked delta rule's pass over the chunks in order, after
// chunk_prep (gdn_chunk_prep.cu). A block has a value head's 32 state columns
// (128 x 32 in its warps' accumulators for the whole call, a tf32 copy in
// shared memory as an operand); per chunk, on tensor cores (mma m16n8k8 tf32,
// fp32 sums):
//   V' = U - W S,   S = Gamma_C S + K^T diag(e^(gam_C - gam)) V',
//   O = diag(Gamma) Q S + M V'   (off the chain: nothing waits for it).
// Two column blocks of a head form a cluster: each brings half of the
// operands they share (W, K, Q, M: 56 KB a chunk) by bulk copies multicast to
// both, and its own U columns, two chunks ahead. The old form had each of a
// head's four blocks load all of them (8 MB from L2 a chunk step, ~3.8 us a
// chunk at 2K tokens; now 2.2-2.4 us on an H100). Clusters of all four lost:
// with one block an SM only 30 such clusters run at once
// (bench/results/cluster-occupancy.txt), so 32 heads took two waves; 66
// clusters of two do.
#include "backends/cuda/gdn_chunked.cuh"
#include "backends/cuda/gdn_prefill.h"

namespace tern::cuda::chunked {

namespace {

constexpr int kTiles = kD / kCols, kCluster = 2, kThreads = 256;  // kTiles: blocks a head
// S and V' rows: the B loads (rows 2 t, 2 t + 1, columns g) in distinct banks.
constexpr int kVS = kCols + 4;
// Shared memory, byte offsets: two stages of a chunk's operands as the
// scratch holds them, then S, V' and diag(e^(gam_C - gam)) V' (fp32), the
// stages' barriers.
constexpr int kStW = 0, kStK = kStW + kC * kRowH, kStQ = kStK + kC * kRowH,
              kStM = kStQ + kC * kRowH, kStU = kStM + kC * kC * 2, kStF = kStU + kUTile,
              kStage = kStF + 1024;
constexpr int kSmS = 2 * kStage, kSmVp = kSmS + kD * kVS * 4, kSmVk = kSmVp + kC * kVS * 4,
              kSmBar = kSmVk + kC * kVS * 4, kSmTotal = kSmBar + 16;
constexpr uint32_t kStageBytes = 3 * kC * kRowH + kC * kC * 2 + kUTile + kF * 4;
constexpr uint16_t kAll = (1u << kCluster) - 1;

// `bytes` from global src to shared dst in each block of the cluster in
// `mask` (the same offset in each), completing on the barrier at bar's offset
// in each.
__device__ __forceinline__ void bulk_multicast(void* dst, const void* src, uint32_t bytes,
                                               uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}
// The whole cluster past this point (all threads); release and acquire, so
// shared memory written before the arrive is seen after the wait. The relaxed
// arrive orders nothing (a release would wait for the block's global stores).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Waits for a stage's phase. A copy that never lands traps (a launch error)
// after 2 s instead of hanging the GPU.
__device__ __forceinline__ void wait_stage(uint64_t* bar, uint32_t parity) {
  const uint64_t t0 = global_ns();
  uint32_t done = 0;
  for (;;) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (global_ns() - t0 > 2000000000ull) __trap();
  }
}

// Chunk c's operands into stage `st` (one thread): this block's part of W, K,
// Q and M (and F from rank 0) to the whole cluster, its U tile to itself.
__device__ void load_chunk(const DeltaArgs& a, uint8_t* st, uint64_t* bar, int c, int n, int rank,
                           int tile) {
  const int Hv = a.v_heads, Hk = a.k_heads, chunks = (a.T + kC - 1) / kC;
  const auto* base = reinterpret_cast<const uint8_t*>(a.scratch);
  const uint8_t* rec = base + (size_t(c) * Hv + n) * kVRec;
  const uint8_t* krec =
      base + size_t(chunks) * Hv * kVRec + (size_t(c) * Hk + n / (Hv / Hk)) * kKRec;
  constexpr int qa = kC * kRowH / kCluster, qm = kC * kC * 2 / kCluster;  // parts, bytes
  mbar_arrive_expect(bar, kStageBytes);
  bulk_multicast(st + kStW + rank * qa, rec + kW + rank * qa, qa, bar, kAll);
  bulk_multicast(st + kStK + rank * qa, krec + kK + rank * qa, qa, bar, kAll);
  bulk_multicast(st + kStQ + rank * qa, krec + kQ + rank * qa, qa, bar, kAll);
  bulk_multicast(st + kStM + rank * qm, rec + kM + rank * qm, qm, bar, kAll);
  if (rank == 0) bulk_multicast(st + kStF, rec + kFo, kF * 4, bar, kAll);
  bulk_copy(st + kStU, rec + kU + tile * kUTile, kUTile, bar);
}

// Calls f(row, column, value) for each accumulator of tiles cb.. (8 columns
// each) of the 16 rows from row0.
template <int NQ, typename F>
__device__ __forceinline__ void each_acc(float (&acc)[NQ][4], int row0, int cb, F&& f) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int q = 0; q < NQ; ++q)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      f(row0 + g + (e >= 2 ? 8 : 0), 8 * (cb + q) + 2 * t + (e & 1), acc[q][e]);
}

// Four 8 x 8 fp16 matrices from shared memory (lane l gives the address of row
// l % 8 of matrix l / 8), as ldmatrix hands them out: lane (g, t) gets row g's
// columns 2 t, 2 t + 1 of each (kTrans: of each one transposed).
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// acc[m][q] += A_m (16 rows from row0) . B (column tiles cb + q, 8 columns
// each) over K = 8 KSTEPS (even), for NA matrices A_m sharing B's loads: A_m
// a swizzled fp16 tile with rows of row_bytes (or, kTrans, stored transposed:
// element (r, k) in row k, column r), B fp32 k-major with stride ldb. A comes
// by ldmatrix, two k steps of a 16-row tile an instruction; the mma's k slots
// t and t + 4 of a step are then columns 2 t and 2 t + 1 (the contraction's
// order is free), and B is read in that order. Rows row0 + 8 m are multiples
// of 8, so a lane's row is j mod 8 and its piece swizzles by j.
template <int KSTEPS, int NQ, int NA = 1, bool kTrans = false>
__device__ __forceinline__ void tile_mma(float (&acc)[NA][NQ][4], const uint8_t* const (&A)[NA],
                                         int row_bytes, int row0, const float* B, int ldb, int cb) {
  static_assert(KSTEPS % 2 == 0, "k steps in pairs");
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  // This lane's row address: matrix lane / 8 is rows + 8 (m & 1), k step + (m >> 1).
  const int j = lane & 7, mi = lane >> 3, r = row0 + 8 * (mi & 1), kp = mi >> 1;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk += 2) {
    uint32_t f[NA][4];
#pragma unroll
    for (int m = 0; m < NA; ++m)
      ldsm_x4<kTrans>(f[m], kTrans ? A[m] + (8 * (kp + kk) + j) * row_bytes + (((r >> 3) ^ j) << 4)
                                   : A[m] + (r + j) * row_bytes + (((kp + kk) ^ j) << 4));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* br = B + (8 * (kk + h) + 2 * t) * ldb + g;
      float b[NQ][2];
#pragma unroll
      for (int q = 0; q < NQ; ++q) b[q][0] = br[8 * (cb + q)], b[q][1] = br[8 * (cb + q) + ldb];
#pragma unroll
      for (int m = 0; m < NA; ++m) {
        // Rows g and g + 8, columns 2 t and 2 t + 1 of k step kk + h.
        const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&f[m][2 * h]));
        const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&f[m][2 * h + 1]));
#pragma unroll
        for (int q = 0; q < NQ; ++q) mma_tf32(acc[m][q], lo.x, hi.x, lo.y, hi.y, b[q][0], b[q][1]);
      }
    }
  }
}

__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, 1)
    chunk_state_kernel(DeltaArgs a) {
  extern __shared__ __align__(128) uint8_t sm[];
  float *Ss = reinterpret_cast<float*>(sm + kSmS), *Vp = reinterpret_cast<float*>(sm + kSmVp),
        *Vk = reinterpret_cast<float*>(sm + kSmVk);
  uint64_t* full = reinterpret_cast<uint64_t*>(sm + kSmBar);
  const int rank = int(blockIdx.x) % kCluster, tile = int(blockIdx.x) % kTiles;
  const int n = int(blockIdx.x) / kTiles, c0 = tile * kCols;
  const int Hv = a.v_heads, chunks = (a.T + kC - 1) / kC, tid = int(threadIdx.x), w = tid >> 5;
  if (tid == 0) {
    mbar_init(&full[0]);
    mbar_init(&full[1]);
    mbar_init_fence();
  }
  // The state: warp w's rows 16 w.. by the block's 32 columns (4 tiles).
  float* Sg = a.S + size_t(n) * kD * kD + c0;
  float st[1][4][4];
  each_acc(st[0], 16 * w, 0, [&](int r, int col, float& v) {
    v = Sg[size_t(r) * kD + col];
    Ss[r * kVS + col] = tf32(v);
  });
  cluster_arrive();  // every block's barriers set up (and S written) before a copy lands
  cluster_wait();
  if (tid == 0)
    for (int c = 0; c < min(2, chunks); ++c)
      load_chunk(a, sm + c * kStage, &full[c], c, n, rank, tile);
  const int lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int mt = 16 * (w % 4), nb = 2 * (w / 4);  // V' and O: token rows mt.., tiles nb, nb + 1
  for (int c = 0; c < chunks; ++c) {
    const int b = c & 1, L = min(kC, a.T - c * kC);
    const uint8_t* stage = sm + b * kStage;
    const float* F = reinterpret_cast<const float*>(stage + kStF);
    const float* Us = reinterpret_cast<const float*>(stage + kStU);
    wait_stage(&full[b], uint32_t(c >> 1) & 1);
    // 1. W S and Q S (one pass over S); V' = U - W S, and diag(e^(gam_C - gam))
    // V' for the state's update.
    float acc[2][2][4] = {};  // W S, Q S
    tile_mma<kD / 8, 2, 2>(acc, {stage + kStW, stage + kStQ}, kRowH, mt, Ss, kVS, nb);
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mt + g + 8 * h, col = 8 * (nb + q) + 2 * t;
        const float2 u = *reinterpret_cast<const float2*>(Us + u_at(r, col));
        const float x0 = u.x - acc[0][q][2 * h], x1 = u.y - acc[0][q][2 * h + 1], ek = F[kC + r];
        Vp[r * kVS + col] = tf32(x0), Vp[r * kVS + col + 1] = tf32(x1);
        Vk[r * kVS + col] = tf32(x0 * ek), Vk[r * kVS + col + 1] = tf32(x1 * ek);
      }
    __syncthreads();
    // 2. S = Gamma_C S + K^T (diag(e^(gam_C - gam)) V'), K^T from K stored as is.
    const float gc = F[2 * kC];
    each_acc(st[0], 16 * w, 0, [&](int, int, float& v) { v *= gc; });
    tile_mma<kC / 8, 4, 1, true>(st, {stage + kStK}, kRowH, 16 * w, Vk, kVS, 0);
    // 3. O = diag(Gamma) (Q S) + M V'.
    float o[1][2][4];
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][q][e] = acc[1][q][e] * F[mt + g + (e >= 2 ? 8 : 0)];
    tile_mma<kC / 8, 2>(o, {stage + kStM}, 2 * kC, mt, Vp, kVS, nb);
    // Every read of S's copy was in step 1, before the barrier: the new S goes there now.
    each_acc(st[0], 16 * w, 0, [&](int r, int col, float& v) { Ss[r * kVS + col] = tf32(v); });
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mt + g + 8 * h, col = 8 * (nb + q) + 2 * t;
        if (r < L)
          *reinterpret_cast<float2*>(a.o + (size_t(c * kC + r) * Hv + n) * kD + c0 + col) =
              make_float2(o[0][q][2 * h], o[0][q][2 * h + 1]);
      }
    __syncthreads();  // S written, V' and the stage read in this block ...
    cluster_arrive_relaxed();
    cluster_wait();  // ... and in the whole cluster: the stage takes chunk c + 2
    if (tid == 0 && c + 2 < chunks) load_chunk(a, sm + b * kStage, &full[b], c + 2, n, rank, tile);
  }
  each_acc(st[0], 16 * w, 0, [&](int r, int col, float& v) { Sg[size_t(r) * kD + col] = v; });
  cluster_arrive();  // no block leaves while a copy it issued may still land elsewhere
  cluster_wait();
}

}  // namespace

}  // namespace tern::cuda::chunked

namespace tern::cuda {

size_t delta_scratch_floats(int T, int k_heads, int v_heads) {
  const size_t chunks = size_t((T + chunked::kC - 1) / chunked::kC);
  return chunks * (size_t(v_heads) * chunked::kVRec + size_t(k_heads) * chunked::kKRec) /
         sizeof(float);
}

cudaError_t gdn_chunk_state(const DeltaArgs& a, cudaStream_t st) {
  if (a.k_heads <= 0 || a.v_heads % a.k_heads != 0 || a.scratch == nullptr)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  using chunked::kSmTotal;
  if (cudaError_t e = cudaFuncSetAttribute(chunked::chunk_state_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmTotal);
      e != cudaSuccess)
    return e;
  chunked::chunk_state_kernel<<<a.v_heads * chunked::kTiles, chunked::kThreads, kSmTotal, st>>>(a);
  return cudaGetLastError();
}

}  // namespace tern::cuda
