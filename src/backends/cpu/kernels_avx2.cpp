// The AVX2 + FMA kernel table: kernels_generic.h built with -mavx2 -mfma
// -mf16c (the compiler vectorises the fp32 kernels 8 wide), and the 4-bit
// matmul of kernels_avx2.h on vpmaddubsw. Nothing in it needs more than
// AVX2, FMA and F16C: the table for CPUs without AVX-512 (and TERN_CPU_ISA=avx2
// elsewhere).
#include "backends/cpu/kernels_avx2.h"

namespace tern::cpu {

extern const Kernels kAvx2Kernels = avx2::table<false>(Isa::avx2, "avx2");

}  // namespace tern::cpu
