// The portable kernel table: kernels_generic.h built with the project's
// baseline flags (what every CPU runs; on ARM the compiler's NEON).
#include "backends/cpu/fast/kernels_generic.h"

namespace tern::cpu::fast {

extern const Kernels kPortableKernels = {Isa::portable,          "portable",
                                         generic::quantize,      generic::gemm_q4,
                                         generic::gemm_f32,      generic::delta_recurrent,
                                         generic::delta_chunked, generic::attention};

}  // namespace tern::cpu::fast
