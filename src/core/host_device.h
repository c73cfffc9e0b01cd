// TERN_HD marks small inline functions shared by host code and CUDA kernels,
// so that a kernel and its CPU twin compute the same thing from one source.
#pragma once

#ifdef __CUDACC__
#define TERN_HD __host__ __device__
#else
#define TERN_HD
#endif
