#include "core/env.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"

namespace tern {

std::span<const EnvVar> env_vars() {
  static constexpr EnvVar all[] = {kThreadsEnv, kCpuIsaEnv, kCpuPack16Env, kApiKeyEnv,
                                   kRequireGpuEnv};
  return all;
}

std::optional<std::string> env_text(const EnvVar& v) {
  const char* s = std::getenv(v.name);
  if (!s || !*s) return std::nullopt;
  return std::string(s);
}

std::optional<long long> env_int(const EnvVar& v) {
  const auto s = env_text(v);
  if (!s) return std::nullopt;
  long long n = 0;
  const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), n);
  if (ec != std::errc() || end != s->data() + s->size())
    fail("{}={}: not an integer ({})", v.name, *s, v.what);
  return n;
}

}  // namespace tern
