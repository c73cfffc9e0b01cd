// Flushes denormal floats to zero on the calling thread while in scope. The
// chunked delta rule multiplies decays exp(gamma_r - gamma_s) that underflow
// on strongly decaying heads, and every FMA on a denormal takes a microcode
// assist on x86 (~100 cycles): that rule measured ~10x slower (docs/cpu-backend.md).
// A denormal is below 1.2e-38, far under anything the fast path's bounds see.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tern {

class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFtz | kDaz);
  }
  ~FlushDenormals() {
    _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kFtz = 1u << 15, kDaz = 1u << 6;  // MXCSR bits
  unsigned saved_;
#elif defined(__aarch64__)
  FlushDenormals() : saved_(__builtin_aarch64_get_fpcr64()) {
    __builtin_aarch64_set_fpcr64(saved_ | kFz);
  }
  ~FlushDenormals() {
    __builtin_aarch64_set_fpcr64(saved_);
  }

 private:
  static constexpr uint64_t kFz = uint64_t(1) << 24;  // FPCR.FZ
  uint64_t saved_;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
};

}  // namespace tern
