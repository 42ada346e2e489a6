#include "api/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cctype>
#include <chrono>
#include <limits>

#include "api/types.h"

namespace tide::api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpClient::Impl {
  std::string host;
  std::string port;
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool connected = false;

  // Runs the io_context until the pending operation completes.
  void Run() {
    ioc.restart();
    ioc.run();
  }

  beast::error_code Connect(int timeout_ms) {
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port, ec);
    if (ec) return ec;
    stream.expires_after(std::chrono::milliseconds(timeout_ms));
    stream.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    Run();
    if (!ec) {
      stream.socket().set_option(tcp::no_delay(true));
      connected = true;
      buffer.clear();
    }
    return ec;
  }

  void Close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
    connected = false;
  }

  http::request<http::string_body> MakeRequest(const std::string& method, const std::string& target,
                                               std::string_view body,
                                               const std::map<std::string, std::string>& headers) {
    http::request<http::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(http::field::host, host + ":" + port);
    req.set(http::field::user_agent, "tide");
    for (auto& [k, v] : headers) req.set(k, v);
    req.body() = std::string(body);
    req.prepare_payload();
    req.keep_alive(true);
    return req;
  }

  beast::error_code Write(http::request<http::string_body>& req, int timeout_ms) {
    beast::error_code ec;
    stream.expires_after(std::chrono::milliseconds(timeout_ms));
    http::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
    Run();
    return ec;
  }
};

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Create(const std::string& base_url) {
  std::string rest = base_url;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.rfind("https://", 0) == 0) {
    return Status::InvalidArgument("https is not supported yet: " + base_url, "server");
  } else {
    return Status::InvalidArgument("server URL must start with http://: " + base_url, "server");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return Status::InvalidArgument("server URL must not have a path: " + base_url, "server");
  }
  auto impl = std::make_unique<Impl>();
  auto colon = rest.rfind(':');
  if (colon == std::string::npos) {
    impl->host = rest;
    impl->port = "80";
  } else {
    impl->host = rest.substr(0, colon);
    impl->port = rest.substr(colon + 1);
  }
  if (impl->host.empty() || impl->port.empty()) {
    return Status::InvalidArgument("bad server URL: " + base_url, "server");
  }
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

Result<HttpResponse> HttpClient::Do(const std::string& method, const std::string& target,
                                    std::string_view body,
                                    const std::map<std::string, std::string>& headers,
                                    int timeout_ms) {
  Impl& im = *impl_;
  auto req = im.MakeRequest(method, target, body, headers);
  // A kept-alive connection may have been closed by the server: retry once on
  // a fresh one if the failure happened before any answer arrived.
  for (int round = 0; round < 2; ++round) {
    bool reused = im.connected;
    if (!im.connected) {
      if (auto ec = im.Connect(timeout_ms)) {
        im.Close();
        return Status::Unavailable("cannot connect to " + im.host + ":" + im.port + ": " +
                                   ec.message());
      }
    }
    beast::error_code ec = im.Write(req, timeout_ms);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ULL << 34);
    // Read the answer even if the write failed: a server may refuse a body
    // (413) before it has read all of it.
    beast::error_code write_ec = ec;
    im.stream.expires_after(std::chrono::milliseconds(timeout_ms));
    http::async_read(im.stream, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    im.Run();
    if (ec && write_ec) ec = write_ec;
    if (ec) {
      im.Close();
      // Resend only if a kept-alive connection was found closed; after a
      // timeout the server may have acted on the request.
      if (reused && round == 0 && !parser.got_some() && ec != beast::error::timeout) continue;
      return Status::Unavailable(method + " " + target + ": " + ec.message());
    }
    auto res = parser.release();
    HttpResponse out;
    out.status = static_cast<int>(res.result_int());
    out.body = std::move(res.body());
    for (auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    if (!res.keep_alive()) im.Close();
    return out;
  }
  return Status::Unavailable(method + " " + target + ": connection lost");
}

Status HttpClient::Stream(const std::string& target,
                          const std::map<std::string, std::string>& headers,
                          const std::function<bool(std::string_view)>& on_data,
                          int idle_timeout_ms) {
  Impl& im = *impl_;
  if (im.connected) im.Close();  // a stream gets a fresh connection
  if (auto ec = im.Connect(idle_timeout_ms)) {
    im.Close();
    return Status::Unavailable("cannot connect to " + im.host + ":" + im.port + ": " + ec.message());
  }
  auto req = im.MakeRequest("GET", target, "", headers);
  if (auto ec = im.Write(req, idle_timeout_ms)) {
    im.Close();
    return Status::Unavailable("GET " + target + ": " + ec.message());
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  bool stop = false;
  std::function<size_t(std::uint64_t, beast::string_view, beast::error_code&)> on_chunk =
      [&](std::uint64_t, beast::string_view data, beast::error_code&) -> size_t {
    if (!stop && parser.get().result_int() / 100 == 2 && !data.empty()) {
      if (!on_data(std::string_view(data.data(), data.size()))) stop = true;
    }
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  beast::error_code ec;
  im.stream.expires_after(std::chrono::milliseconds(idle_timeout_ms));
  http::async_read_header(im.stream, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
  im.Run();
  while (!ec && !parser.is_done() && !stop) {
    im.stream.expires_after(std::chrono::milliseconds(idle_timeout_ms));
    http::async_read_some(im.stream, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    im.Run();
  }
  int status = parser.is_header_done() ? static_cast<int>(parser.get().result_int()) : 0;
  std::string body = parser.get().body();  // non-chunked answers land here
  im.Close();
  if (stop) return Status::Ok();
  if (ec) return Status::Unavailable("GET " + target + ": " + ec.message());
  if (status / 100 != 2) {
    return StatusFromErrorJson(status, body);
  }
  if (!body.empty()) on_data(body);
  return Status::Ok();
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace tide::api
