// The portable kernel table: kernels_generic.h built with the project's
// baseline flags (what every CPU runs; on ARM the compiler's NEON).
#include "backends/cpu/kernels_generic.h"

namespace tern::cpu {

extern const Kernels kPortableKernels = generic::table(Isa::portable, "portable", generic::gemm_q4);

}  // namespace tern::cpu
