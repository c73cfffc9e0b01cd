// An error a client caused or must be told about, with the HTTP status and
// the fields of OpenAI's error object ({"error": {"message", "type", "param",
// "code"}}); other APIs map the same status to their own shapes.
#pragma once

#include <string>

#include "core/error.h"

namespace tern::server {

// Which API's error shape and wording a refusal takes.
enum class ErrorStyle { openai, anthropic };

class ApiError : public Error {
 public:
  ApiError(int http_status, const std::string& message, std::string param_name = "",
           std::string error_code = "")
      : Error(message),
        status(http_status),
        param(std::move(param_name)),
        code(std::move(error_code)) {}
  int status;
  std::string param, code;
  // OpenAI's "type" for the status.
  const char* type() const {
    switch (status) {
      case 401:
        return "authentication_error";
      case 403:
        return "permission_error";
      case 404:
        return "not_found_error";
      case 413:
        return "invalid_request_error";
      case 429:
        return "rate_limit_error";
      case 503:
        return "service_unavailable";
      default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
  }
};

template <typename... Args>
[[noreturn]] void bad_request(const std::string& param, fmt::format_string<Args...> f,
                              Args&&... args) {
  throw ApiError(400, fmt::format(f, std::forward<Args>(args)...), param);
}

}  // namespace tern::server
