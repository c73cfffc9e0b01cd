// Every TERN_* environment variable tern reads, in one table: the name, what
// it does, and typed readers. `tern --help` lists them (cli/main.cpp).
#pragma once

#include <optional>
#include <span>
#include <string>

namespace tern {

struct EnvVar {
  const char* name;
  const char* what;
};

inline constexpr EnvVar kThreadsEnv{"TERN_THREADS",
                                    "threads of the CPU backends' pool (default: one per "
                                    "hardware thread)"};
inline constexpr EnvVar kCpuIsaEnv{"TERN_CPU_ISA",
                                   "the CPU backend's instruction set: amx, avx512, avxvnni, "
                                   "avx2 or portable (default: the best this CPU has)"};
inline constexpr EnvVar kCpuPack16Env{"TERN_CPU_PACK16",
                                      "0: keep the MLX layout on the CPU instead of repacking "
                                      "4-bit matrices into 16-row records"};
inline constexpr EnvVar kApiKeyEnv{"TERN_API_KEY", "tern serve: the API key (as --api-key)"};
inline constexpr EnvVar kRequireGpuEnv{"TERN_REQUIRE_GPU",
                                       "tests: 1 makes a GPU test without a GPU fail, not skip"};

std::span<const EnvVar> env_vars();

// The variable's value; nullopt when unset (or empty).
std::optional<std::string> env_text(const EnvVar& v);
// As an integer; a value that is not one is an error naming the variable.
std::optional<long long> env_int(const EnvVar& v);

}  // namespace tern
