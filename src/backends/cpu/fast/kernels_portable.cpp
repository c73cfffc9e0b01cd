// The portable kernel table: kernels_generic.h built with the project's
// baseline flags (what every CPU runs; on ARM the compiler's NEON).
#include "backends/cpu/fast/kernels_generic.h"

namespace tern::cpu::fast {

extern const Kernels kPortableKernels = {.isa = Isa::portable,
                                         .name = "portable",
                                         .quantize = generic::quantize,
                                         .gemm_q4 = generic::gemm_q4,
                                         .gemm_f32 = generic::gemm_f32,
                                         .silu_mul = generic::silu_mul,
                                         .delta_recurrent = generic::delta_recurrent,
                                         .delta_chunked = generic::delta_chunked,
                                         .attention = generic::attention};

}  // namespace tern::cpu::fast
