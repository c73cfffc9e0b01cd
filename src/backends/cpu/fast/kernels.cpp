// Run-time choice of the kernel table by what the CPU supports.
#include "backends/cpu/fast/kernels.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tern::cpu::fast {

extern const Kernels kPortableKernels;
#ifdef TERN_CPU_X86
extern const Kernels kAvx2Kernels;
extern const Kernels kAvx512Kernels;
#endif

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable:
      return "portable";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v = {Isa::portable};
#ifdef TERN_CPU_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return v;
  v.push_back(Isa::avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    v.push_back(Isa::avx512);
#endif
  return v;
}

Isa default_isa() {
  const std::vector<Isa> have = supported_isas();
  if (const char* env = std::getenv("TERN_CPU_ISA")) {
    for (Isa i : have)
      if (std::string(env) == isa_name(i)) return i;
    fail("TERN_CPU_ISA={}: not an instruction set this CPU and build support", env);
  }
  return have.back();
}

const Kernels& kernels(Isa isa) {
#ifdef TERN_CPU_X86
  if (isa == Isa::avx2) return kAvx2Kernels;
  if (isa == Isa::avx512) return kAvx512Kernels;
#endif
  TERN_CHECK(isa == Isa::portable);
  return kPortableKernels;
}

}  // namespace tern::cpu::fast
