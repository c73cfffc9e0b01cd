// The portable kernel table: kernels_generic.h built with the project's
// baseline flags (what every CPU runs; on ARM the compiler's NEON).
#include "backends/cpu/fast/kernels_generic.h"

namespace tern::cpu::fast {

extern const Kernels kPortableKernels = generic::table(Isa::portable, "portable", generic::gemm_q4);

}  // namespace tern::cpu::fast
