// An HTTP request and response as the server's routes see them, apart from
// the transport that reads and writes them (http_transport.h): a request
// arrives whole (its body within the limits), a response is whole or
// streamed chunk by chunk from the worker thread that answers it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tern::server {

struct HttpRequest {
  std::string method;  // GET, HEAD, POST, ...
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Whether the client is still connected (peeks, never reads). A client
  // that half-closes its side counts as gone, as with Go's net/http.
  std::function<bool()> connected = [] { return true; };

  // A header's value ("" when absent); names in any case.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// Where a streamed response's bytes go, from the thread answering it.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Sends bytes as one chunk; waits while the client is slow to read. False
  // once the client is gone (then stop writing).
  virtual bool write(std::string_view bytes) = 0;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type
  std::string content_type, body;
  bool close = false;  // close the connection once the response is written
  // Set for a streamed response: the transport sends the head (chunked),
  // then calls this on the answering thread; the stream ends when it returns.
  std::function<void(ResponseSink&)> stream;

  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

}  // namespace tern::server
