#include "server/http/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <limits>
#include <thread>

namespace tide::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
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
  // Asio may have made the descriptor non-blocking: wait with poll().
  char buf[65536];
  size_t total = 0;
  while (total < (64u << 20)) {
    pollfd pfd{socket.native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 2000) <= 0) break;
    ssize_t n = ::recv(socket.native_handle(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

constexpr int kIdleTimeoutS = 120;
constexpr int kMaxConnections = 2000;

}  // namespace

struct HttpServer::Impl {
  Handler handler;
  BodyLimit body_limit;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};

  void Session(tcp::socket socket);
};

HttpServer::HttpServer(Handler handler, BodyLimit body_limit) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->body_limit = std::move(body_limit);
}

HttpServer::~HttpServer() = default;

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

void HttpServer::Serve() {
  while (!impl_->stopping) {
    beast::error_code ec;
    tcp::socket socket(impl_->ioc);
    impl_->acceptor.accept(socket, ec);
    if (ec) {
      if (impl_->stopping) break;
      spdlog::warn("accept: {}", ec.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    try {
      std::thread([impl = impl_.get(), s = std::move(socket)]() mutable {
        impl->Session(std::move(s));
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
}

void HttpServer::Impl::Session(tcp::socket socket) {
  ++connections;
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  // An idle or trickling client does not hold its thread forever: a read
  // that waits this long ends the connection (sessions use blocking reads).
  timeval idle{kIdleTimeoutS, 0};
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
  if (connections > kMaxConnections) {
    spdlog::warn("{} connections open: refusing one", connections.load());
    http::response<http::string_body> res{http::status::service_unavailable, 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::retry_after, "1");
    res.body() = ErrorBody("unavailable", "too many connections");
    res.keep_alive(false);
    res.prepare_payload();
    http::write(socket, res, ec);
    socket.close(ec);
    --connections;
    return;
  }
  std::string remote_addr;
  {
    auto peer = socket.remote_endpoint(ec);
    if (!ec) {
      auto addr = peer.address();
      // An IPv4 peer on a dual-stack socket reads as ::ffff:a.b.c.d.
      if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
        addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
      }
      remote_addr = addr.to_string();
    }
  }
  beast::flat_buffer buffer;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 * 1024);
    // The real limit depends on the route, known only after the header:
    // lift Beast's default so the header itself is not refused.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(socket, buffer, parser, ec);
    if (ec) {
      if (ec != http::error::end_of_stream) spdlog::debug("read header: {}", ec.message());
      break;
    }
    auto& hdr = parser.get();
    std::string target(hdr.target());
    std::string method(hdr.method_string());
    Request req;
    ParseTarget(target, &req);
    size_t limit = body_limit(method, req.path);
    parser.body_limit(limit);
    if (parser.content_length() && *parser.content_length() > limit) {
      http::response<http::string_body> res{http::status::payload_too_large, hdr.version()};
      res.set(http::field::content_type, "application/json");
      res.body() = ErrorBody("too_large", "request body larger than " + std::to_string(limit) +
                                              " bytes");
      res.keep_alive(false);
      res.prepare_payload();
      http::write(socket, res, ec);
      LingeringClose(socket);
      break;
    }
    http::read(socket, buffer, parser, ec);
    if (ec == http::error::body_limit) {
      http::response<http::string_body> res{http::status::payload_too_large, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = ErrorBody("too_large", "request body larger than " + std::to_string(limit) +
                                              " bytes");
      res.keep_alive(false);
      res.prepare_payload();
      http::write(socket, res, ec);
      LingeringClose(socket);
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
    bool keep_alive = msg.keep_alive();

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
      http::write_header(socket, sr, ec);
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
          net::write(socket, http::make_chunk(net::const_buffer(data.data(), data.size())), ec);
          if (ec) alive = false;
          return alive;
        });
      } catch (const std::exception& e) {
        spdlog::error("stream for {} failed: {}", req.path, e.what());
        alive = false;
      }
      if (alive) net::write(socket, http::make_chunk_last(), ec);
      break;  // a stream ends its connection
    }
    http::response<http::string_body> res{static_cast<http::status>(out.status), msg.version()};
    res.set(http::field::content_type, out.content_type);
    res.set(http::field::server, "tide");
    for (auto& [k, v] : out.headers) res.set(k, v);
    res.body() = std::move(out.body);
    res.keep_alive(keep_alive && !stopping);
    res.prepare_payload();
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  --connections;
}

}  // namespace tide::server
