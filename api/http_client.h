// HttpClient: a small blocking HTTP/1.1 client over Boost.Beast, plain or
// TLS, with keep-alive and per-request timeouts. Boost and OpenSSL stay
// inside http_client.cc.
//
// Not thread-safe: use one client per thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tide::api {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lowercase names
};

// How an https:// server is trusted. With pins, the server's public key
// must be one of them (common/tls.h): no CA is needed and the host name is
// not checked, since the pin names the key itself; the certificate must
// still be within its validity dates. Without pins, the certificate must
// chain to `ca_file` (PEM), or to the system's CA store when it is empty,
// and name the host. A server that fails is refused, never used unverified.
struct TlsTrust {
  std::string ca_file;
  std::vector<std::string> pins;
};

class HttpClient {
 public:
  // `base_url` is "http://HOST:PORT" or "https://HOST:PORT" (port 80 or
  // 443 when left out).
  static Result<std::unique_ptr<HttpClient>> Create(const std::string& base_url,
                                                    const TlsTrust& trust = {});
  ~HttpClient();

  // One request. Transport failures are kUnavailable; any HTTP status,
  // including 4xx and 5xx, is a successful Result.
  Result<HttpResponse> Do(const std::string& method, const std::string& target,
                          std::string_view body, const std::map<std::string, std::string>& headers,
                          int timeout_ms = 30'000);

  // GET whose body arrives over time (chunked). `on_data` gets each piece as
  // it arrives and returns false to stop early. `idle_timeout_ms` bounds the
  // wait for the next piece. Non-2xx answers return the error as a Status.
  Status Stream(const std::string& target, const std::map<std::string, std::string>& headers,
                const std::function<bool(std::string_view)>& on_data, int idle_timeout_ms);

 private:
  struct Impl;
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "a b/c" -> "a%20b%2Fc" (for one path segment or query value).
std::string UrlEncode(std::string_view s);

}  // namespace tide::api
