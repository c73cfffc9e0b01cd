// XXH64, xxHash's 64-bit hash (Yann Collet's published algorithm, written
// out here: Debian ships the library without headers), streaming: digest()
// may be taken at any point and more bytes added after it. The disk cache
// names and checks its files with it; it is not a cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tern {

class Hash64 {
 public:
  explicit Hash64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest() const;  // of every byte so far

 private:
  uint64_t seed_, v_[4];
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

uint64_t hash64(const void* data, size_t n, uint64_t seed = 0);
// 16 lower-case hex digits.
std::string hex64(uint64_t h);
// This executable's file, hashed once: the build a cache entry came from.
uint64_t executable_hash();

}  // namespace tern
