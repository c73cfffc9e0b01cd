// The AVX2 table with AVX-VNNI (Alder Lake and later, Zen 5): kernels_avx2.h
// built with -mavxvnni as well, the packed records' products on the VEX
// vpdpbusd (4 products into a 32-bit lane in one instruction, where AVX2
// needs vpmaddubsw, an add and a share of vpmaddwd).
#include "backends/cpu/kernels_avx2.h"

namespace tern::cpu {

extern const Kernels kAvxVnniKernels = avx2::table<true>(Isa::avxvnni, "avxvnni");

}  // namespace tern::cpu
