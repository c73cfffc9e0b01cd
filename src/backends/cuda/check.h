// CUDA runtime errors as tern errors (host side).
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace tern::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {}", what, cudaGetErrorString(e));
}

}  // namespace tern::cuda
