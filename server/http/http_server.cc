#include "server/http/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

namespace tide::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {

int FromHex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = FromHex(s[i + 1]);
      int lo = FromHex(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && s[i] == '+') ? ' ' : s[i];
  }
  return out;
}

void ParseTarget(std::string_view target, Request* req) {
  size_t q = target.find('?');
  req->path = PercentDecode(target.substr(0, q), false);
  if (q == std::string_view::npos) return;
  std::string_view qs = target.substr(q + 1);
  while (!qs.empty()) {
    size_t amp = qs.find('&');
    std::string_view kv = qs.substr(0, amp);
    size_t eq = kv.find('=');
    std::string k = PercentDecode(kv.substr(0, eq), true);
    std::string v = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
    if (!k.empty()) req->query[k] = v;
    if (amp == std::string_view::npos) break;
    qs = qs.substr(amp + 1);
  }
}

std::string ErrorBody(const char* code, const std::string& message) {
  return std::string("{\"error\":{\"code\":\"") + code + "\",\"message\":\"" + message + "\"}}";
}

// After refusing a body we did not read: stop sending, then read and drop
// what the client is still sending for a moment, so closing does not reset
// the connection before the client has read our answer.
void LingeringClose(tcp::socket& socket) {
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  char buf[65536];
  size_t total = 0;
  while (total < (64u << 20)) {
    pollfd pfd{socket.native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 2000) <= 0) break;
    ssize_t n = ::recv(socket.native_handle(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

constexpr auto kIdleTimeout = std::chrono::seconds(120);   // between requests
constexpr auto kHeaderTimeout = std::chrono::seconds(10);  // first byte to end of header
constexpr auto kIoTimeout = std::chrono::seconds(60);      // each body read or answer write
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr int kMaxConnections = 2000;
constexpr std::chrono::milliseconds kRateLimitPause{1000};  // the most a 429 holds a connection

// Waits `pause` without reading from the peer; false as soon as it hangs
// up (what it sent meanwhile is not served).
bool PeerStaysFor(tcp::socket& socket, std::chrono::milliseconds pause) {
  const auto until = std::chrono::steady_clock::now() + pause;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    // Only the hang-up wakes the poll: data waits its turn.
    pollfd pfd{socket.native_handle(), POLLRDHUP, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) > 0) return false;
  }
}

// A 429's Retry-After, in whole seconds as sent; a second if it has none.
std::chrono::milliseconds RetryAfter(const Response& out) {
  auto it = out.headers.find("Retry-After");
  if (it == out.headers.end()) return kRateLimitPause;
  char* end = nullptr;
  long s = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || s < 0) return kRateLimitPause;
  return std::chrono::milliseconds(s * 1000);
}

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Each connection thread runs its own io_context: operations are async so
// that they have deadlines, and the thread waits for each one in turn.
class Conn {
 public:
  explicit Conn(net::io_context& ioc) : ioc_(ioc) {}
  template <typename Start>
  beast::error_code Await(Start start) {
    beast::error_code ec;
    bytes_ = 0;
    start([this, &ec](beast::error_code e, auto... n) {
      ec = e;
      if constexpr (sizeof...(n) == 1) bytes_ = static_cast<size_t>((n, ...));
    });
    ioc_.restart();
    ioc_.run();
    return ec;
  }
  size_t bytes() const { return bytes_; }  // what the last operation moved

 private:
  net::io_context& ioc_;
  size_t bytes_ = 0;
};

std::shared_ptr<ssl::context> MakeTlsContext(const std::string& cert_file, const std::string& key_file,
                                             Status* status) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE);
  // TLS 1.2: forward-secret AEAD suites only (TLS 1.3's are all of that kind).
  SSL_CTX_set_cipher_list(native, "ECDHE+AESGCM:ECDHE+CHACHA20");
  beast::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    *status = Status::InvalidArgument("cannot use certificate " + cert_file + ": " + ec.message(),
                                      "tls-cert");
    return nullptr;
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec && ec.message().find("mismatch") != std::string::npos) {
    *status = Status::InvalidArgument(
        "private key " + key_file + " does not belong to certificate " + cert_file, "tls-key");
    return nullptr;
  }
  if (ec) {
    *status = Status::InvalidArgument("cannot use private key " + key_file + ": " + ec.message(),
                                      "tls-key");
    return nullptr;
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    *status = Status::InvalidArgument(
        "private key " + key_file + " does not belong to certificate " + cert_file, "tls-key");
    return nullptr;
  }
  return ctx;
}

// A Host header fit to echo in a redirect: host, port, brackets only.
bool SafeHost(const std::string& host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '[' && c != ']') {
      return false;
    }
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  Handler handler;
  BodyLimit body_limit;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};
  // The sockets of open connections, so that Shutdown can wake the threads
  // that wait on them, and the server's end can wait for those threads.
  std::mutex open_mu;
  std::condition_variable open_cv;
  std::multiset<int> open_fds;  // guarded by open_mu
  mutable std::mutex tls_mu;
  std::string cert_file, key_file;       // guarded by tls_mu
  std::shared_ptr<ssl::context> tls_ctx;  // guarded by tls_mu; null: plain HTTP

  std::shared_ptr<ssl::context> Tls() const {
    std::lock_guard<std::mutex> lock(tls_mu);
    return tls_ctx;
  }
  void Session(std::shared_ptr<net::io_context> ioc, tcp::socket socket);
  // Serves requests on one connection until it ends.
  template <typename Stream>
  void Serve(Stream& stream, Conn& conn, const std::string& remote_addr);
  // A plain HTTP request reached the TLS port: say so, then close.
  void RefusePlain(beast::tcp_stream& stream, Conn& conn);
};

HttpServer::HttpServer(Handler handler, BodyLimit body_limit) : impl_(std::make_shared<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->body_limit = std::move(body_limit);
}

HttpServer::~HttpServer() {
  Shutdown();
  // Every connection's thread sees its socket shut and ends (a stream at
  // its next write): wait for them, so none runs on past the server.
  std::unique_lock<std::mutex> lock(impl_->open_mu);
  if (!impl_->open_cv.wait_for(lock, std::chrono::seconds(10),
                               [&] { return impl_->open_fds.empty(); })) {
    // An agent's long-poll writes nothing until its wait (up to 60 s)
    // ends, so it sees its shut socket only then.
    spdlog::warn("{} connections still open 10 s after the server stopped", impl_->open_fds.size());
  }
}

Result<std::string> HttpServer::Listen(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("listen address must be HOST:PORT, got \"" + address + "\"",
                                   "listen");
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  beast::error_code ec;
  auto ip = net::ip::make_address(host.empty() ? "127.0.0.1" : host, ec);
  if (ec) return Status::InvalidArgument("bad listen host \"" + host + "\"", "listen");
  int port_num = 0;
  try {
    port_num = std::stoi(port);
  } catch (...) {
    return Status::InvalidArgument("bad listen port \"" + port + "\"", "listen");
  }
  tcp::endpoint ep(ip, static_cast<unsigned short>(port_num));
  auto& acc = impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + address + ": " + ec.message());
  auto bound = acc.local_endpoint();
  return bound.address().to_string() + ":" + std::to_string(bound.port());
}

Status HttpServer::EnableTls(const std::string& cert_file, const std::string& key_file) {
  Status st;
  auto ctx = MakeTlsContext(cert_file, key_file, &st);
  if (!ctx) return st;
  std::lock_guard<std::mutex> lock(impl_->tls_mu);
  impl_->cert_file = cert_file;
  impl_->key_file = key_file;
  impl_->tls_ctx = std::move(ctx);
  return Status::Ok();
}

Status HttpServer::ReloadTls() {
  std::string cert, key;
  {
    std::lock_guard<std::mutex> lock(impl_->tls_mu);
    if (!impl_->tls_ctx) return Status::InvalidArgument("this server does not serve TLS", "tls-cert");
    cert = impl_->cert_file;
    key = impl_->key_file;
  }
  return EnableTls(cert, key);
}

bool HttpServer::tls() const { return impl_->Tls() != nullptr; }

void HttpServer::Serve() {
  while (!impl_->stopping) {
    beast::error_code ec;
    // Each connection's operations run on its own io_context, in its thread.
    auto ioc = std::make_shared<net::io_context>(1);
    tcp::socket socket(*ioc);
    impl_->acceptor.accept(socket, ec);
    if (ec) {
      if (impl_->stopping) break;
      spdlog::warn("accept: {}", ec.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    try {
      std::thread([impl = impl_, ioc, s = std::move(socket)]() mutable {
        impl->Session(std::move(ioc), std::move(s));
      }).detach();
    } catch (const std::system_error& e) {
      // Out of threads: refuse this connection, keep serving the others.
      spdlog::error("cannot start a connection thread: {}", e.what());
    }
  }
}

void HttpServer::Shutdown() {
  impl_->stopping = true;
  beast::error_code ec;
  // A blocking accept() is not woken by close() from another thread on
  // Linux; shutdown() of the listening socket wakes it.
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.cancel(ec);
  impl_->acceptor.close(ec);
  std::lock_guard<std::mutex> lock(impl_->open_mu);
  for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RDWR);
}

void HttpServer::Impl::Session(std::shared_ptr<net::io_context> ioc, tcp::socket accepted) {
  const int fd = accepted.native_handle();
  {
    std::lock_guard<std::mutex> lock(open_mu);
    if (stopping) return;
    open_fds.insert(fd);
  }
  // The socket leaves the open set before it is closed (Forget), so that
  // Shutdown never shuts a number the kernel has given to another file.
  struct Closed {
    Impl* impl;
    int fd;
    bool forgotten = false;
    void Forget() {
      if (forgotten) return;
      forgotten = true;
      std::lock_guard<std::mutex> lock(impl->open_mu);
      impl->open_fds.erase(impl->open_fds.find(fd));
      impl->open_cv.notify_all();
    }
    ~Closed() {
      // OpenSSL's state of this thread goes now, not at its exit, which
      // may come after the server (and the process) is gone.
      OPENSSL_thread_stop();
      Forget();
    }
  } closed{this, fd};
  ++connections;
  beast::error_code ec;
  accepted.set_option(tcp::no_delay(true), ec);
  std::string remote_addr;
  {
    auto peer = accepted.remote_endpoint(ec);
    if (!ec) {
      auto addr = peer.address();
      // An IPv4 peer on a dual-stack socket reads as ::ffff:a.b.c.d.
      if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
        addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
      }
      remote_addr = addr.to_string();
    }
  }
  Conn conn(*ioc);
  beast::tcp_stream stream(std::move(accepted));
  std::shared_ptr<ssl::context> tls = Tls();
  if (connections > kMaxConnections) {
    spdlog::warn("{} connections open: refusing one", connections.load());
    if (!tls) {
      http::response<http::string_body> res{http::status::service_unavailable, 11};
      res.set(http::field::content_type, "application/json");
      res.set(http::field::retry_after, "1");
      res.body() = ErrorBody("unavailable", "too many connections");
      res.keep_alive(false);
      res.prepare_payload();
      stream.expires_after(kIoTimeout);
      conn.Await([&](auto h) { http::async_write(stream, res, h); });
    }
  } else if (!tls) {
    Serve(stream, conn, remote_addr);
  } else {
    // TLS records start with 0x16 (handshake); anything else is plain HTTP.
    stream.expires_after(kIdleTimeout);
    ec = conn.Await([&](auto h) { stream.socket().async_wait(tcp::socket::wait_read, h); });
    unsigned char first = 0;
    ssize_t n = ec ? -1 : ::recv(stream.socket().native_handle(), &first, 1, MSG_PEEK);
    if (n == 1 && first != 0x16) {
      RefusePlain(stream, conn);
    } else if (n == 1) {
      TlsStream tls_stream(std::move(stream), *tls);
      beast::get_lowest_layer(tls_stream).expires_after(kHandshakeTimeout);
      ec = conn.Await([&](auto h) { tls_stream.async_handshake(ssl::stream_base::server, h); });
      if (ec) {
        spdlog::debug("TLS handshake with {}: {}", remote_addr, ec.message());
      } else {
        Serve(tls_stream, conn, remote_addr);
        beast::get_lowest_layer(tls_stream).expires_after(std::chrono::seconds(2));
        conn.Await([&](auto h) { tls_stream.async_shutdown(h); });
      }
      closed.Forget();
      beast::get_lowest_layer(tls_stream).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(tls_stream).close();
      --connections;
      return;
    }
  }
  closed.Forget();
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.close();
  --connections;
}

void HttpServer::Impl::RefusePlain(beast::tcp_stream& stream, Conn& conn) {
  beast::flat_buffer buffer;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(16 * 1024);
  stream.expires_after(kHeaderTimeout);
  beast::error_code ec = conn.Await([&](auto h) { http::async_read_header(stream, buffer, parser, h); });
  if (ec) return;
  auto& req = parser.get();
  std::string host(req[http::field::host]);
  std::string message = "this server speaks HTTPS only: use https://" +
                        (SafeHost(host) ? host : std::string("HOST:PORT"));
  bool redirect = (req.method() == http::verb::get || req.method() == http::verb::head) &&
                  SafeHost(host);
  http::response<http::string_body> res{redirect ? http::status::permanent_redirect
                                                 : http::status::bad_request,
                                        req.version()};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::server, "tide");
  if (redirect) {
    std::string target(req.target());
    if (target.empty() || target[0] != '/') target = "/";
    // A login link's code that came in clear is not carried on to be used.
    if (target.rfind("/login", 0) == 0) target = "/login";
    for (char& c : target) {
      if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) c = '_';
    }
    res.set(http::field::location, "https://" + host + target);
  }
  res.body() = ErrorBody("tls_required", message);
  res.keep_alive(false);
  res.prepare_payload();
  stream.expires_after(kIoTimeout);
  conn.Await([&](auto h) { http::async_write(stream, res, h); });
  LingeringClose(stream.socket());
}

template <typename Stream>
void HttpServer::Impl::Serve(Stream& stream, Conn& conn, const std::string& remote_addr) {
  auto& lowest = beast::get_lowest_layer(stream);
  tcp::socket& socket = lowest.socket();
  beast::flat_buffer buffer;
  beast::error_code ec;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 * 1024);
    // The real limit depends on the route, known only after the header:
    // lift Beast's default so the header itself is not refused.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    // Idle until the next request's first byte, then the whole header
    // within kHeaderTimeout.
    if (buffer.size() == 0) {
      lowest.expires_after(kIdleTimeout);
      ec = conn.Await([&](auto h) { stream.async_read_some(buffer.prepare(64 * 1024), h); });
      if (ec) {
        if (ec != net::error::eof && ec != beast::error::timeout) {
          spdlog::debug("read from {}: {}", remote_addr, ec.message());
        }
        break;
      }
      buffer.commit(conn.bytes());
    }
    lowest.expires_after(kHeaderTimeout);
    ec = conn.Await([&](auto h) { http::async_read_header(stream, buffer, parser, h); });
    if (ec) {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == net::error::eof || ec == net::error::connection_reset) {
        break;
      }
      spdlog::debug("read header from {}: {}", remote_addr, ec.message());
      // A malformed request gets a 400 before the close. Bytes that open
      // a TLS handshake (record type 22) mean an https:// client reached a
      // plain port: its TLS library then reports a bad record, and says so.
      bool tls_hello = buffer.size() > 0 &&
                       static_cast<const unsigned char*>(buffer.data().data())[0] == 0x16;
      http::response<http::string_body> res{http::status::bad_request, 11};
      res.set(http::field::content_type, "application/json");
      res.set(http::field::server, "tide");
      res.body() = tls_hello ? ErrorBody("tls_not_served",
                                         "this server speaks plain HTTP: use http://")
                             : ErrorBody("bad_request", "malformed HTTP request: " + ec.message());
      res.keep_alive(false);
      res.prepare_payload();
      lowest.expires_after(kIoTimeout);
      conn.Await([&](auto h) { http::async_write(stream, res, h); });
      LingeringClose(socket);
      break;
    }
    auto& hdr = parser.get();
    std::string target(hdr.target());
    std::string method(hdr.method_string());
    Request req;
    ParseTarget(target, &req);
    size_t limit = body_limit(method, req.path);
    parser.body_limit(limit);
    auto too_large = [&] {
      http::response<http::string_body> res{http::status::payload_too_large, hdr.version()};
      res.set(http::field::content_type, "application/json");
      res.body() = ErrorBody("too_large", "request body larger than " + std::to_string(limit) +
                                              " bytes");
      res.keep_alive(false);
      res.prepare_payload();
      lowest.expires_after(kIoTimeout);
      conn.Await([&](auto h) { http::async_write(stream, res, h); });
      LingeringClose(socket);
    };
    if (parser.content_length() && *parser.content_length() > limit) {
      too_large();
      break;
    }
    // The body: each piece within kIoTimeout of the last.
    while (!ec && !parser.is_done()) {
      lowest.expires_after(kIoTimeout);
      ec = conn.Await([&](auto h) { http::async_read_some(stream, buffer, parser, h); });
    }
    if (ec == http::error::body_limit) {
      too_large();
      break;
    }
    if (ec) {
      if (ec != http::error::end_of_stream) spdlog::debug("read {}: {}", req.path, ec.message());
      break;
    }
    auto msg = parser.release();
    req.method = method;
    for (auto& f : msg) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(f.value());
    }
    req.body = std::move(msg.body());
    req.remote_addr = remote_addr;
    req.secure = !std::is_same_v<Stream, beast::tcp_stream>;
    bool keep_alive = msg.keep_alive();

    // A server shut down (and perhaps gone) handles nothing more.
    if (stopping) break;
    Response out;
    try {
      out = handler(req);
    } catch (const std::exception& e) {
      spdlog::error("handler for {} {} threw: {}", method, req.path, e.what());
      out.status = 500;
      out.body = ErrorBody("internal", "internal error");
    }

    if (out.stream) {
      http::response<http::empty_body> res{static_cast<http::status>(out.status), msg.version()};
      res.set(http::field::content_type, out.content_type);
      for (auto& [k, v] : out.headers) res.set(k, v);
      res.chunked(true);
      res.keep_alive(false);
      http::response_serializer<http::empty_body> sr{res};
      lowest.expires_after(kIoTimeout);
      ec = conn.Await([&](auto h) { http::async_write_header(stream, sr, h); });
      if (ec) break;
      bool alive = true;
      try {
        out.stream([&](std::string_view data) {
          if (!alive) return false;
          if (data.empty()) {
            // A probe: has the client gone? (it never sends during a stream)
            char c;
            ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) alive = false;
            return alive;
          }
          lowest.expires_after(kIoTimeout);
          auto chunk = http::make_chunk(net::const_buffer(data.data(), data.size()));
          ec = conn.Await([&](auto h) { net::async_write(stream, chunk, h); });
          if (ec) alive = false;
          return alive;
        });
      } catch (const std::exception& e) {
        spdlog::error("stream for {} failed: {}", req.path, e.what());
        alive = false;
      }
      if (alive) {
        lowest.expires_after(kIoTimeout);
        auto last = http::make_chunk_last();
        conn.Await([&](auto h) { net::async_write(stream, last, h); });
      }
      break;  // a stream ends its connection
    }
    http::response<http::string_body> res{static_cast<http::status>(out.status), msg.version()};
    res.set(http::field::content_type, out.content_type);
    res.set(http::field::server, "tide");
    for (auto& [k, v] : out.headers) res.set(k, v);
    res.body() = std::move(out.body);
    res.keep_alive(keep_alive && !stopping);
    res.prepare_payload();
    lowest.expires_after(kIoTimeout);
    ec = conn.Await([&](auto h) { http::async_write(stream, res, h); });
    if (ec || !res.keep_alive()) break;
    // Over its rate: this connection is not read again before Retry-After
    // (at most a second), so a flood costs a waiting thread, not the CPU
    // that other tokens' requests need. A client that hangs up is let go.
    if (out.status == 429 && !PeerStaysFor(socket, std::min(kRateLimitPause, RetryAfter(out)))) {
      break;
    }
  }
}

std::string Request::Cookie(std::string_view name) const {
  // "a=1; tide_session=…; b=2" (RFC 6265 §5.4: pairs split by "; ").
  std::string header = Header("cookie");
  std::string_view rest = header;
  while (!rest.empty()) {
    size_t end = rest.find(';');
    std::string_view pair = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return std::string(pair.substr(eq + 1));
    }
  }
  return "";
}

}  // namespace tide::server
