#include "api/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <openssl/x509.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <limits>

#include "api/types.h"
#include "common/tls.h"

namespace tide::api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {

// The system's CA store, read once per process and shared by every client:
// OpenSSL 3.0 decodes the whole bundle when it is read, which takes longer
// than many requests.
X509_STORE* SystemCaStore() {
  static X509_STORE* const store = [] {
    X509_STORE* s = X509_STORE_new();
    if (s && X509_STORE_set_default_paths(s) != 1) {
      X509_STORE_free(s);
      s = nullptr;
    }
    return s;
  }();
  return store;
}

}  // namespace

struct HttpClient::Impl {
  std::string host;
  std::string port;
  net::io_context ioc;
  std::unique_ptr<beast::tcp_stream> plain;
  // https://: the context, and the stream of the current connection.
  std::unique_ptr<ssl::context> tls_ctx;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  std::vector<std::string> pins;
  std::string trust_error;  // why the last handshake refused the server
  beast::flat_buffer buffer;
  bool connected = false;

  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  // Calls f with the stream requests go over.
  template <typename F>
  auto Io(F f) {
    if (tls) return f(*tls);
    return f(*plain);
  }

  // The verify callback: pins, or the CA chain and the host name.
  bool Verify(bool preverified, ssl::verify_context& vc) {
    X509_STORE_CTX* sc = vc.native_handle();
    int depth = X509_STORE_CTX_get_error_depth(sc);
    X509* cert = X509_STORE_CTX_get_current_cert(sc);
    std::string pin;
    if (cert && depth == 0) {
      unsigned char* der = nullptr;
      int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
      if (n > 0) pin = tls::PinOfSpki(der, static_cast<size_t>(n));
      OPENSSL_free(der);
    }
    if (pins.empty()) {
      if (!preverified) {
        int err = X509_STORE_CTX_get_error(sc);
        trust_error = std::string("the server's certificate is not trusted (") +
                      X509_verify_cert_error_string(err) + ")";
        if (err != X509_V_ERR_CERT_HAS_EXPIRED && err != X509_V_ERR_CERT_NOT_YET_VALID) {
          trust_error += ": give the CA with --ca-file, or pin the server with --pin" +
                         (pin.empty() ? std::string() : " (it presents " + pin + ")");
        }
        return false;
      }
      if (depth == 0 && !ssl::host_name_verification(host)(preverified, vc)) {
        trust_error = "the server's certificate is not for " + host;
        return false;
      }
      return true;
    }
    if (depth > 0) return true;  // with pins only the server's own key counts
    if (!cert) return false;
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
      trust_error = "the server's certificate has expired";
      return false;
    }
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
      trust_error = "the server's certificate is not valid yet";
      return false;
    }
    if (std::find(pins.begin(), pins.end(), pin) == pins.end()) {
      std::string given;
      for (const auto& p : pins) given += (given.empty() ? "" : ", ") + p;
      trust_error = "the server presents " + pin + ", which is not a pin given (" + given + ")";
      return false;
    }
    return true;
  }

  // Runs the io_context until the pending operation completes.
  void Run() {
    ioc.restart();
    ioc.run();
  }

  // Connects (and for https:// shakes hands). Errors are kUnavailable,
  // and kPermissionDenied when the server is not the one trusted.
  Status Connect(int timeout_ms) {
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port, ec);
    if (ec) return Status::Unavailable("cannot resolve " + host + ": " + ec.message());
    if (tls_ctx) {
      tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, *tls_ctx);
    } else {
      plain = std::make_unique<beast::tcp_stream>(ioc);
    }
    auto& s = lowest();
    s.expires_after(std::chrono::milliseconds(timeout_ms));
    s.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    Run();
    if (ec) return Status::Unavailable("cannot connect to " + host + ":" + port + ": " + ec.message());
    s.socket().set_option(tcp::no_delay(true), ec);
    if (tls) {
      beast::error_code ip_ec;
      net::ip::make_address(host, ip_ec);
      if (ip_ec) SSL_set_tlsext_host_name(tls->native_handle(), host.c_str());  // SNI for names
      tls->set_verify_mode(ssl::verify_peer);
      tls->set_verify_callback(
          [this](bool preverified, ssl::verify_context& vc) { return Verify(preverified, vc); });
      trust_error.clear();
      tls->async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
      Run();
      if (ec) {
        if (!trust_error.empty()) {
          return Status::PermissionDenied("refusing https://" + host + ":" + port + ": " + trust_error);
        }
        std::string why = ec.message();
        if (why.find("wrong version number") != std::string::npos) {
          why += " (the server does not speak TLS: use http://)";
        }
        return Status::Unavailable("TLS handshake with " + host + ":" + port + " failed: " + why);
      }
    }
    connected = true;
    buffer.clear();
    return Status::Ok();
  }

  void Close() {
    beast::error_code ignored;
    if (tls || plain) {
      auto& s = lowest();
      s.socket().shutdown(tcp::socket::shutdown_both, ignored);
      s.close();
    }
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
    lowest().expires_after(std::chrono::milliseconds(timeout_ms));
    Io([&](auto& s) { http::async_write(s, req, [&](beast::error_code e, size_t) { ec = e; }); });
    Run();
    return ec;
  }
};

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Create(const std::string& base_url,
                                                       const TlsTrust& trust) {
  std::string rest = base_url;
  bool https = false;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.rfind("https://", 0) == 0) {
    rest = rest.substr(8);
    https = true;
  } else {
    return Status::InvalidArgument("server URL must start with http:// or https://: " + base_url,
                                   "server");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return Status::InvalidArgument("server URL must not have a path: " + base_url, "server");
  }
  auto impl = std::make_unique<Impl>();
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || rest.back() == ']') {
    impl->host = rest;
    impl->port = https ? "443" : "80";
  } else {
    impl->host = rest.substr(0, colon);
    impl->port = rest.substr(colon + 1);
  }
  if (impl->host.size() > 2 && impl->host.front() == '[' && impl->host.back() == ']') {
    impl->host = impl->host.substr(1, impl->host.size() - 2);  // [::1]
  }
  if (impl->host.empty() || impl->port.empty()) {
    return Status::InvalidArgument("bad server URL: " + base_url, "server");
  }
  for (const auto& pin : trust.pins) {
    if (!tls::IsPin(pin)) return Status::InvalidArgument("\"" + pin + "\" is not a pin", "pin");
  }
  if (https) {
    impl->tls_ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(impl->tls_ctx->native_handle(), TLS1_2_VERSION);
    beast::error_code ec;
    if (!trust.pins.empty()) {
      // A pin names the server's key itself: no CA is consulted, so none is loaded.
    } else if (!trust.ca_file.empty()) {
      impl->tls_ctx->load_verify_file(trust.ca_file, ec);
      if (ec) {
        return Status::InvalidArgument("cannot use CA file " + trust.ca_file + ": " + ec.message(),
                                       "ca-file");
      }
    } else if (X509_STORE* store = SystemCaStore()) {
      SSL_CTX_set1_cert_store(impl->tls_ctx->native_handle(), store);
    }
    impl->pins = trust.pins;
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
      if (Status st = im.Connect(timeout_ms); !st.ok()) {
        im.Close();
        return st;
      }
    }
    beast::error_code ec = im.Write(req, timeout_ms);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ULL << 34);
    // Read the answer even if the write failed: a server may refuse a body
    // (413) before it has read all of it.
    beast::error_code write_ec = ec;
    im.lowest().expires_after(std::chrono::milliseconds(timeout_ms));
    im.Io([&](auto& s) {
      http::async_read(s, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    });
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
  if (Status st = im.Connect(idle_timeout_ms); !st.ok()) {
    im.Close();
    return st;
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
  im.lowest().expires_after(std::chrono::milliseconds(idle_timeout_ms));
  im.Io([&](auto& s) {
    http::async_read_header(s, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
  });
  im.Run();
  while (!ec && !parser.is_done() && !stop) {
    im.lowest().expires_after(std::chrono::milliseconds(idle_timeout_ms));
    im.Io([&](auto& s) {
      http::async_read_some(s, im.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    });
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
