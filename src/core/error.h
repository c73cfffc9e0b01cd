// Errors that reach a user: one exception type whose message names the problem
// (file, tensor, field, flag). Thrown where a problem is found, caught at the
// command-line and server boundaries. Broken internal invariants use TERN_CHECK.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tern {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* cond, const char* file, int line);

}  // namespace tern

#define TERN_CHECK(cond) ((cond) ? (void)0 : ::tern::check_failed(#cond, __FILE__, __LINE__))
