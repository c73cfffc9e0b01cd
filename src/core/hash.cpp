#include "core/hash.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace tern {

namespace {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL,
                   P3 = 0x165667B19E3779F9ULL, P4 = 0x85EBCA77C2B2AE63ULL,
                   P5 = 0x27D4EB2F165667C5ULL;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts (x86-64, ARM64)
  return v;
}
uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round(uint64_t acc, uint64_t in) {
  return rotl(acc + in * P2, 31) * P1;
}
uint64_t merge(uint64_t h, uint64_t v) {
  return (h ^ round(0, v)) * P1 + P4;
}

}  // namespace

Hash64::Hash64(uint64_t seed)
    : seed_(seed), v_{seed + P1 + P2, seed + P2, seed, seed - P1}, buf_{} {}

void Hash64::update(const void* data, size_t n) {
  auto p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (buffered_ + n < 32) {
    std::memcpy(buf_ + buffered_, p, n);
    buffered_ += n;
    return;
  }
  if (buffered_ > 0) {
    const size_t take = 32 - buffered_;
    std::memcpy(buf_ + buffered_, p, take);
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(buf_ + 8 * i));
    p += take, n -= take, buffered_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32)
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(p + 8 * i));
  std::memcpy(buf_, p, n);
  buffered_ = n;
}

uint64_t Hash64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (uint64_t v : v_) h = merge(h, v);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3;
    p += 4, n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t hash64(const void* data, size_t n, uint64_t seed) {
  Hash64 h(seed);
  h.update(data, n);
  return h.digest();
}

std::string hex64(uint64_t h) {
  return fmt::format("{:016x}", h);
}

uint64_t executable_hash() {
  static const uint64_t h = [] {
    std::ifstream f("/proc/self/exe", std::ios::binary);
    if (!f) fail("cannot read this executable (/proc/self/exe)");
    Hash64 acc;
    std::vector<char> buf(size_t(1) << 20);
    while (f) {
      f.read(buf.data(), std::streamsize(buf.size()));
      acc.update(buf.data(), size_t(f.gcount()));
    }
    return acc.digest();
  }();
  return h;
}

}  // namespace tern
