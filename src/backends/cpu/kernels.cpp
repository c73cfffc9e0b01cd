// Run-time choice of the kernel table by what the CPU supports.
#include "backends/cpu/kernels.h"

#include <cstdlib>
#include <string>

#if defined(TERN_CPU_X86)
#include <cpuid.h>
#endif
#if defined(TERN_CPU_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/env.h"
#include "core/error.h"

namespace tern::cpu {

extern const Kernels kPortableKernels;
#ifdef TERN_CPU_X86
extern const Kernels kAvx2Kernels;
extern const Kernels kAvxVnniKernels;
extern const Kernels kAvx512Kernels;
extern const Kernels kAmxKernels;
#endif

namespace {

#ifdef TERN_CPU_X86
// AMX-TILE and AMX-INT8 in CPUID, and Linux's permission for this process to
// use the tile data (the kernel grants its 8 KB of state only on request,
// arch_prctl ARCH_REQ_XCOMP_PERM; without it the first tile instruction
// faults). Asked once.
bool amx_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;
#ifdef __linux__
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
  }();
  return usable;
}
#endif

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable:
      return "portable";
    case Isa::avx2:
      return "avx2";
    case Isa::avxvnni:
      return "avxvnni";
    case Isa::avx512:
      return "avx512";
    case Isa::amx:
      return "amx";
  }
  return "?";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v = {Isa::portable};
#ifdef TERN_CPU_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return v;
  v.push_back(Isa::avx2);
  if (__builtin_cpu_supports("avxvnni")) v.push_back(Isa::avxvnni);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    v.push_back(Isa::avx512);
    if (amx_usable()) v.push_back(Isa::amx);
  }
#endif
  return v;
}

Isa supported_isa(std::string_view name, std::string_view what) {
  for (Isa i : supported_isas())
    if (name == isa_name(i)) return i;
  fail("{}: {} is not an instruction set this CPU and build support", what, name);
}

Isa default_isa() {
  if (const auto env = env_text(kCpuIsaEnv)) return supported_isa(*env, kCpuIsaEnv.name);
  return supported_isas().back();
}

const Kernels& kernels(Isa isa) {
#ifdef TERN_CPU_X86
  if (isa == Isa::avx2) return kAvx2Kernels;
  if (isa == Isa::avxvnni) return kAvxVnniKernels;
  if (isa == Isa::avx512) return kAvx512Kernels;
  if (isa == Isa::amx) return kAmxKernels;
#endif
  TERN_CHECK(isa == Isa::portable);
  return kPortableKernels;
}

}  // namespace tern::cpu
