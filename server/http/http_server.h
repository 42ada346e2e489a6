// HttpServer: HTTP/1.1 with keep-alive over Boost.Beast, plain or TLS, one
// thread per connection. Boost and OpenSSL stay inside http_server.cc:
// handlers see only Request and Response.
//
// Bodies are limited before they are read: a request whose Content-Length
// exceeds the limit for its path gets 413 without the body being read.
//
// Every read and write has a deadline: a client that sends its request
// header slower than kHeaderTimeout, stalls a body or an answer, or idles
// between requests longer than kIdleTimeout loses its connection, so a slow
// client cannot hold a thread.
//
// With TLS (TLS 1.2 and 1.3 only, ECDHE with AES-GCM or ChaCha20), a client
// that speaks plain HTTP to the port is told so: a GET gets a 308 redirect
// to https://, anything else a 400, both with a JSON error that says to use
// https://.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tide::server {

struct Request {
  std::string method;
  std::string path;                           // decoded, without the query
  std::map<std::string, std::string> query;   // decoded
  std::map<std::string, std::string> headers; // lowercase names
  std::string body;
  std::string remote_addr;  // the peer's IP address
  bool secure = false;      // it came over TLS

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
  // The value of cookie `name` in the Cookie header, or "".
  std::string Cookie(std::string_view name) const;
  std::string Query(const std::string& key) const {
    auto it = query.find(key);
    return it == query.end() ? "" : it->second;
  }
};

// Writes pieces of a chunked response; false once the client has gone. An
// empty piece writes nothing and only checks whether the client is there.
using ChunkWriter = std::function<bool(std::string_view)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
  // If set, the body is streamed: called once, writes chunks until done.
  std::function<void(const ChunkWriter&)> stream;
};

using Handler = std::function<Response(const Request&)>;
// Body limit in bytes for a request line (method, path).
using BodyLimit = std::function<size_t(const std::string& method, const std::string& path)>;

class HttpServer {
 public:
  HttpServer(Handler handler, BodyLimit body_limit);
  ~HttpServer();

  // Binds "HOST:PORT" (port 0: any free port). Returns the bound "HOST:PORT".
  Result<std::string> Listen(const std::string& address);
  // Serves HTTPS with the certificate chain and private key in these PEM
  // files. Call before Serve(). Errors name the file.
  Status EnableTls(const std::string& cert_file, const std::string& key_file);
  // Reads the files of EnableTls again; connections accepted from now on use
  // them, open ones keep theirs. On error the old certificate stays.
  Status ReloadTls();
  bool tls() const;
  // Accepts connections until Shutdown(). Blocks.
  void Serve();
  // Stops accepting; open connections end after their current request.
  void Shutdown();

 private:
  struct Impl;
  // Shared with the connections' threads, which may outlive the server
  // by the moments it takes them to see that it stopped.
  std::shared_ptr<Impl> impl_;
};

}  // namespace tide::server
