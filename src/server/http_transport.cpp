#include "server/http_transport.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <utility>

#include "core/error.h"

namespace tern::server {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr size_t kBacklog = size_t(1) << 20;       // a stream's bytes queued for a slow client
constexpr auto kLinger = std::chrono::seconds(1);  // draining what a closing client still sends
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);  // after running out of fds

// Threads that answer requests, in arrival order.
class Workers {
 public:
  explicit Workers(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Workers() { stop(); }
  void post(std::function<void()> f) {
    {
      std::lock_guard lock(m_);
      tasks_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  // Drops what has not started; waits for what has.
  void stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lock(m_);
      stop_ = true;
      dropped.swap(tasks_);
    }
    cv_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (stop_) return;
        f = std::move(tasks_.front());
        tasks_.pop_front();
      }
      f();
      // glibc keeps what a thread frees in that thread's arena, and requests
      // move between workers: give back what a request left free (a big
      // grammar, a long prompt's buffers), or each arena keeps its peak.
      malloc_trim(0);
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

std::string text(beast::string_view v) {
  return std::string(v.data(), v.size());
}

// A read that failed on what the client sent (a parse error), rather than on
// the connection (closed, reset, timed out).
bool malformed(error_code ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

constexpr const char* kBodyTooLarge = "the request body is larger than the server accepts";

// Where a connection is: waiting for a request, reading its head or body,
// having it answered, or closing.
enum class Phase { idle, head, body, answering, closing };

}  // namespace

class Connection;

struct HttpTransport::Impl {
  Impl(HttpService& s, const HttpLimits& l) : service(s), limits(l), workers(l.workers) {}

  // Makes room for a new connection from `client` under the caps: false when
  // every connection in the way is being answered.
  bool make_room(const std::string& client);
  // Bodies over budget: the largest still being read is refused.
  void make_room_for_bodies();
  void accept();

  HttpService& service;
  HttpLimits limits;
  // Declared before io: connections leave it as io's handlers are destroyed.
  mutable std::mutex m;
  std::unordered_set<Connection*> connections;
  std::atomic<uint64_t> evicted{0};
  std::atomic<size_t> bodies{0};  // body bytes held
  std::atomic<int> answering{0};  // requests with a worker or queued for one
  std::atomic<bool> stopping{false};
  net::io_context io{1};
  // Keeps io running with nothing pending (stop() posts to it after closing the acceptor).
  net::executor_work_guard<net::io_context::executor_type> keep_running{io.get_executor()};
  tcp::acceptor acceptor{io};
  net::steady_timer accept_retry{io};
  std::thread io_thread;
  Workers workers;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpTransport::Impl& t, tcp::socket s, std::string client)
      : t_(t), socket_(std::move(s)), timer_(t.io), client_(std::move(client)) {
    std::lock_guard lock(t_.m);
    t_.connections.insert(this);
  }
  ~Connection() {
    release_body();
    uncount();
    std::lock_guard lock(t_.m);
    t_.connections.erase(this);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start() { next_request(); }

  // Ends every pending operation; the socket is shut now and closed when the
  // last handler lets go (a worker may still hold it).
  void abort() {
    phase_ = Phase::closing;
    uncount();
    {
      std::lock_guard lock(wm_);
      gone_ = true;
    }
    wcv_.notify_all();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.cancel(ec);
    timer_.cancel();
  }

  // For the caps (I/O thread).
  Phase phase() const { return phase_; }
  Clock::time_point since() const { return since_; }
  const std::string& client() const { return client_; }
  size_t body_held() const { return body_held_; }

 private:
  class Sink;

  void enter(Phase p) {
    phase_ = p;
    since_ = Clock::now();
  }

  void arm(std::chrono::seconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->abort();
    });
  }

  void next_request() {
    if (t_.stopping) return abort();
    enter(Phase::idle);
    req_ = HttpRequest{};
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(t_.limits.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(UINT64_MAX);             // checked once admitted (a refusal reads no body)
    if (buffer_.size() > 0) return read_head();  // pipelined
    arm(t_.limits.idle_timeout);
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      if (!ec && self->phase_ == Phase::idle) self->read_head();
    });
  }

  void read_head() {
    enter(Phase::head);
    arm(t_.limits.header_timeout);
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(error_code ec) {
    if (phase_ != Phase::head) return;
    if (ec == http::error::header_limit)
      return refuse(431, fmt::format("the request's head is larger than the server accepts ({} "
                                     "KiB of request line and headers)",
                                     t_.limits.max_header_bytes >> 10));
    if (ec) return malformed(ec) ? refuse(400, "the request is not valid HTTP/1.1") : abort();
    const auto& msg = parser_->get();
    req_.method = text(msg.method_string());
    req_.path = text(msg.target());
    req_.path.resize(std::min(req_.path.size(), req_.path.find('?')));
    for (const auto& f : msg) req_.headers.emplace_back(text(f.name_string()), text(f.value()));
    req_.connected = [w = weak_from_this()] {
      const auto c = w.lock();
      return c && c->client_alive();
    };
    version_ = msg.version();
    keep_alive_ = msg.keep_alive();
    body_read_ = parser_->is_done();
    admitted_ = HttpResponse{};
    if (!t_.service.admit(req_, admitted_)) return respond(std::move(admitted_));
    if (body_read_) return dispatch();
    if (parser_->content_length() && *parser_->content_length() > t_.limits.max_body)
      return refuse(413, kBodyTooLarge);
    parser_->body_limit(t_.limits.max_body);  // chunked bodies too
    if (beast::iequals(msg[http::field::expect], "100-continue"))
      send("HTTP/1.1 100 Continue\r\n\r\n", false);
    enter(Phase::body);
    arm(t_.limits.body_timeout);
    read_body();
  }

  void read_body() {
    http::async_read_some(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (phase_ != Phase::body) return;
    if (ec == http::error::body_limit) return refuse(413, kBodyTooLarge);
    if (ec) return malformed(ec) ? refuse(400, "the request body could not be read") : abort();
    hold_body(parser_->get().body().size());
    if (t_.bodies > t_.limits.bodies_budget()) {
      t_.make_room_for_bodies();
      if (phase_ != Phase::body) return;
    }
    if (!parser_->is_done()) return read_body();
    body_read_ = true;
    req_.body = std::move(parser_->get().body());
    dispatch();
  }

  void uncount() {
    if (std::exchange(counted_, false)) --t_.answering;
  }

  void hold_body(size_t n) {
    t_.bodies += n - body_held_;
    body_held_ = n;
  }
  void release_body() { hold_body(0); }

  void dispatch() {
    enter(Phase::answering);
    timer_.cancel();
    if (t_.service.quick(req_)) {
      HttpResponse res = std::move(admitted_);
      answer(res);
      return respond(std::move(res));
    }
    ++t_.answering;  // until its response is written: stop() waits for that
    counted_ = true;
    t_.workers.post([self = shared_from_this()] { self->work(); });
  }

  // Into the response admit() began (its CORS headers).
  void answer(HttpResponse& res) {
    try {
      t_.service.answer(req_, res);
    } catch (const std::exception& e) {
      res.stream = nullptr;
      t_.service.refuse(req_, 500, e.what(), res);
    }
  }

  // On a worker: answers, then hands the response to the I/O thread.
  void work();

  // A refusal by the transport: the connection closes after it.
  void refuse(int status, const std::string& message) {
    HttpResponse res;
    t_.service.refuse(req_, status, message, res);
    res.close = true;
    respond(std::move(res));
  }

  // Whether the connection stays open after this response.
  bool closing_after(const HttpResponse& res) const {
    return res.close || !keep_alive_ || !body_read_ || t_.stopping;
  }

  template <class Body>
  void fill_head(http::response<Body>& m, const HttpResponse& res, bool close) const {
    m.result(unsigned(res.status));
    m.version(11);  // what the server speaks; an HTTP/1.0 client gets no chunks, and a close
    if (!res.content_type.empty()) m.set(http::field::content_type, res.content_type);
    for (const auto& [name, value] : res.headers) m.insert(name, value);
    m.keep_alive(!close);
    if (!close)
      m.set(http::field::keep_alive, fmt::format("timeout={}", t_.limits.idle_timeout.count()));
  }

  // A whole response (I/O thread).
  void respond(HttpResponse res) {
    if (phase_ != Phase::closing) enter(Phase::answering);
    close_ = closing_after(res);
    http::response<http::string_body> m;
    fill_head(m, res, close_);
    m.body() = std::move(res.body);
    m.prepare_payload();
    std::ostringstream os;
    if (req_.method == "HEAD")
      os << m.base();
    else
      os << m;
    send(std::move(os).str(), true);
  }

  // A streamed response's head (I/O thread).
  void respond_head(const HttpResponse& res) {
    close_ = closing_after(res) || version_ < 11;  // HTTP/1.0: the close ends the body
    chunked_ = version_ >= 11;
    http::response<http::empty_body> m;
    fill_head(m, res, close_);
    if (chunked_) m.chunked(true);
    std::ostringstream os;
    os << m.base();
    send(std::move(os).str(), false);
  }

  // Queues bytes to write (I/O thread); `last`: the response ends with them.
  void send(std::string bytes, bool last) {
    if (phase_ == Phase::closing) return unqueue(bytes.size());
    last_queued_ = last;
    out_.push_back(std::move(bytes));
    pump();
  }

  void unqueue(size_t n) {
    {
      std::lock_guard lock(wm_);
      queued_ -= std::min(queued_, n);
    }
    wcv_.notify_all();
  }

  void pump() {
    if (writing_ || out_.empty()) return;
    writing_ = true;
    // A response's writes (an interim 100 Continue is under the body's deadline).
    if (phase_ == Phase::answering) arm(t_.limits.write_timeout);
    net::async_write(socket_, net::buffer(out_.front()),
                     [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); });
  }

  void on_written(error_code ec) {
    writing_ = false;
    unqueue(out_.front().size());
    out_.pop_front();
    if (ec || phase_ == Phase::closing) return abort();
    if (!out_.empty()) return pump();
    if (phase_ != Phase::answering) return;  // the 100 Continue
    timer_.cancel();
    if (!last_queued_) return;  // a stream waiting for its next bytes
    last_queued_ = false;
    release_body();
    uncount();
    if (close_) return linger();
    next_request();
  }

  // Closes after the response: stops sending, then reads (and drops) what
  // the client still sends for up to kLinger, so that closing with unread
  // data does not reset the connection before the client has read the answer.
  void linger() {
    enter(Phase::closing);
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    timer_.expires_after(kLinger);
    timer_.async_wait([self = shared_from_this()](error_code e) {
      if (!e) self->abort();
    });
    drain();
  }

  void drain() {
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(16384),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->abort();
                              self->drain();
                            });
  }

  // From a worker: the client is still there (a peek, never a read).
  bool client_alive() {
    {
      std::lock_guard lock(wm_);
      if (gone_) return false;
    }
    char c;
    const ssize_t n = ::recv(socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }

  // From a worker: queues bytes for the I/O thread; waits while too many are
  // queued. False once the client is gone.
  bool post(std::string bytes, bool last) {
    std::unique_lock lock(wm_);
    if (gone_) return false;
    queued_ += bytes.size();
    net::post(t_.io, [self = shared_from_this(), b = std::move(bytes), last]() mutable {
      self->send(std::move(b), last);
    });
    wcv_.wait(lock, [&] { return gone_ || queued_ < kBacklog; });
    return !gone_;
  }

  HttpTransport::Impl& t_;
  tcp::socket socket_;
  net::steady_timer timer_;
  std::string client_;
  Phase phase_ = Phase::idle;
  Clock::time_point since_ = Clock::now();
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest req_;
  HttpResponse admitted_;
  unsigned version_ = 11;
  bool keep_alive_ = true, body_read_ = true, close_ = false, chunked_ = true;
  size_t body_held_ = 0;
  bool counted_ = false;  // in t_.answering
  std::deque<std::string> out_;
  bool writing_ = false, last_queued_ = false;
  // Shared with the worker answering the request.
  std::mutex wm_;
  std::condition_variable wcv_;
  size_t queued_ = 0;
  bool gone_ = false;
};

class Connection::Sink : public ResponseSink {
 public:
  explicit Sink(Connection& c) : c_(c) {}
  bool write(std::string_view bytes) override {
    if (bytes.empty()) return c_.client_alive();
    if (!c_.chunked_) return c_.post(std::string(bytes), false);
    std::string chunk = fmt::format("{:x}\r\n", bytes.size());
    chunk.append(bytes);
    chunk += "\r\n";
    return c_.post(std::move(chunk), false);
  }

 private:
  Connection& c_;
};

void Connection::work() {
  HttpResponse res = std::move(admitted_);
  answer(res);
  if (!res.stream) {
    net::post(t_.io, [self = shared_from_this(), r = std::move(res)]() mutable {
      self->respond(std::move(r));
    });
  } else {
    // The head's fields are read on the I/O thread before this thread goes on.
    std::promise<void> head_sent;
    net::post(t_.io, [self = shared_from_this(), &res, &head_sent] {
      self->respond_head(res);
      head_sent.set_value();
    });
    head_sent.get_future().wait();
    Sink sink(*this);
    res.stream(sink);
    post(chunked_ ? "0\r\n\r\n" : "", true);
  }
}

bool HttpTransport::Impl::make_room(const std::string& client) {
  std::lock_guard lock(m);
  int from_client = 0;
  for (const Connection* c : connections) from_client += c->client() == client;
  const bool over_client = from_client >= limits.max_client_connections;
  if (!over_client && int(connections.size()) < limits.max_connections) return true;
  // One already closing, else the oldest idle one, else the oldest still
  // sending its request; never one being answered.
  Connection* victim = nullptr;
  auto rank = [](const Connection* c) {
    const Phase p = c->phase();
    return std::pair(p == Phase::closing ? 0 : p == Phase::idle ? 1 : 2, c->since());
  };
  for (Connection* c : connections) {
    if (c->phase() == Phase::answering || (over_client && c->client() != client)) continue;
    if (!victim || rank(c) < rank(victim)) victim = c;
  }
  if (!victim) return false;
  if (victim->phase() != Phase::closing) ++evicted;
  victim->abort();
  return true;
}

void HttpTransport::Impl::make_room_for_bodies() {
  std::lock_guard lock(m);
  Connection* largest = nullptr;
  for (Connection* c : connections)
    if (c->phase() == Phase::body && (!largest || c->body_held() > largest->body_held()))
      largest = c;
  if (!largest) return;
  spdlog::warn("bodies held over {} MiB: closing a connection still sending {} MiB",
               limits.bodies_budget() >> 20, largest->body_held() >> 20);
  largest->abort();
  ++evicted;
}

void HttpTransport::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors: wait for some to close rather than spin.
      spdlog::warn("accepting a connection: {}", ec.message());
      accept_retry.expires_after(kAcceptRetry);
      accept_retry.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    error_code e;
    s.set_option(tcp::no_delay(true), e);  // a streamed token must not wait for an ACK (Nagle)
    const auto remote = s.remote_endpoint(e);
    const std::string client = e ? "" : remote.address().to_string();
    if (!e && make_room(client)) std::make_shared<Connection>(*this, std::move(s), client)->start();
    accept();
  });
}

HttpTransport::HttpTransport(HttpService& service, const HttpLimits& limits)
    : impl_(std::make_unique<Impl>(service, limits)) {}

HttpTransport::~HttpTransport() {
  stop(std::chrono::milliseconds(0));
}

int HttpTransport::bind(const std::string& host, int port) {
  Impl& t = *impl_;
  error_code ec;
  tcp::resolver resolver(t.io);
  const auto found = resolver.resolve(host, std::to_string(port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) fail("cannot listen on {}:{}: {}", host, port, ec.message());
  const tcp::endpoint at = found.begin()->endpoint();
  t.acceptor.open(at.protocol(), ec);
  if (!ec) t.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) t.acceptor.bind(at, ec);
  if (!ec) t.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", host, port, ec.message());
  // Each connection is a file descriptor: raise the soft limit towards the
  // cap, and cap below what the limit leaves.
  rlimit fds{};
  if (getrlimit(RLIMIT_NOFILE, &fds) == 0) {
    const rlim_t want = rlim_t(t.limits.max_connections) + 64;
    if (fds.rlim_cur < want && fds.rlim_cur < fds.rlim_max) {
      fds.rlim_cur = std::min(want, fds.rlim_max);
      setrlimit(RLIMIT_NOFILE, &fds);
      getrlimit(RLIMIT_NOFILE, &fds);
    }
    if (fds.rlim_cur < want) {
      t.limits.max_connections = std::max(8, int(fds.rlim_cur) - 64);
      spdlog::warn("the file descriptor limit ({}) caps connections at {}", fds.rlim_cur,
                   t.limits.max_connections);
    }
  }
  return t.acceptor.local_endpoint().port();
}

void HttpTransport::start() {
  Impl& t = *impl_;
  t.accept();
  t.io_thread = std::thread([&t] {
    for (;;) {
      try {
        t.io.run();
        return;
      } catch (const std::exception& e) {  // one connection's failure (out of memory, say)
        spdlog::error("HTTP I/O: {}", e.what());
      }
    }
  });
}

void HttpTransport::stop(std::chrono::milliseconds drain) {
  Impl& t = *impl_;
  if (!t.io_thread.joinable()) return;
  t.stopping = true;
  // Runs f on the I/O thread and waits for it.
  auto on_io = [&t](auto f) {
    std::promise<void> done;
    net::post(t.io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  };
  auto abort_all = [&t](bool answering_too) {
    std::lock_guard lock(t.m);
    for (Connection* c : t.connections)
      if (answering_too || c->phase() != Phase::answering) c->abort();
  };
  on_io([&] {
    error_code ec;
    t.acceptor.close(ec);
    t.accept_retry.cancel();
    abort_all(false);
  });
  const auto deadline = Clock::now() + drain;
  while (t.answering > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  on_io([&] { abort_all(true); });  // slow and stalled clients: their writes fail now
  t.workers.stop();
  t.keep_running.reset();
  t.io.stop();
  t.io_thread.join();
}

int HttpTransport::open_connections() const {
  std::lock_guard lock(impl_->m);
  return int(impl_->connections.size());
}

uint64_t HttpTransport::evicted_connections() const {
  return impl_->evicted;
}

}  // namespace tern::server
