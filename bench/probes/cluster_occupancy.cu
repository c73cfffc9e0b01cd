// How many thread-block clusters the H200 runs at once, by the CUDA occupancy
// query, for a decode block's shape (512 threads) at the shared-memory classes
// of common.cuh (a narrow 60 KB block, a wide 150 KB one, 200 KB) and cluster
// sizes 2-16: what a kernel whose blocks hand off through DSMEM (a cluster a
// key head, say) could count on in one wave.
//
//   (-DTERN_PROBES=ON) cmake --build build --target cluster_occupancy && build/cluster_occupancy
#include <cuda_runtime.h>

#include <cstdio>

namespace {

__global__ void block(float* x) {
  extern __shared__ float s[];
  s[threadIdx.x] = 1.0f;
  x[blockIdx.x] = s[0];
}

}  // namespace

int main() {
  cudaFuncSetAttribute(block, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaFuncSetAttribute(block, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (const int kb : {60, 150, 200})
    for (const int c : {2, 3, 4, 5, 6, 7, 8, 16}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(unsigned(c) * 16);  // a multiple of the cluster size
      cfg.blockDim = dim3(512);
      cfg.dynamicSmemBytes = size_t(kb) * 1024;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeClusterDimension;
      at[0].val.clusterDim.x = unsigned(c), at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
      cfg.attrs = at, cfg.numAttrs = 1;
      int n = 0;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, block, &cfg);
      std::printf(
          "%3d KB a block, clusters of %2d: %3d at once (%3d blocks)%s%s\n", kb, c, n, n * c,
          e == cudaSuccess ? "" : " error: ", e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
  return 0;
}
