// The HTTP request path up to the handler (server/http): the bytes a client
// sends, over a real loopback connection to a real HttpServer serving the
// real Api on a Core, through Beast's parser, the target's decoding, body
// limits, authentication and routing, into whichever handler they reach.
// The server must answer or close every connection, and never with a 500
// (an exception out of a handler or a broken invariant).
//
// "@USER@", "@ADMIN@" and "@JOIN@" in an input stand for a user's token,
// the admin's and a join token, which differ in every run, so that inputs
// get past authentication.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "fuzz/check.h"
#include "server/blob_store.h"
#include "server/core.h"
#include "server/http/api.h"
#include "server/http/http_server.h"
#include "store/store.h"

namespace fs = std::filesystem;
using tide::fuzz::Check;

namespace {

struct Server {
  std::unique_ptr<tide::store::Store> store = tide::store::NewMemoryStore();
  std::unique_ptr<tide::server::BlobStore> blobs;
  std::unique_ptr<tide::server::Core> core;
  std::unique_ptr<tide::server::Api> api;
  std::unique_ptr<tide::server::HttpServer> http;
  int port = 0;
  std::string user_token, admin_token, join_token;

  Server() {
    spdlog::set_level(spdlog::level::off);
    std::string tmpl = (fs::temp_directory_path() / "tide-http-fuzz-XXXXXX").string();
    Check(mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    // Removed at exit; a plain pointer, so that it outlives every static.
    static const char* dir = strdup(tmpl.c_str());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(dir, ec);
    });
    blobs = std::make_unique<tide::server::BlobStore>(tmpl + "/blobs");
    Check(blobs->Init().ok(), "blob store");
    core = std::make_unique<tide::server::Core>(store.get(), tide::SystemClock::Default(),
                                                tide::server::CoreOptions{});
    tide::server::BlobStore* b = blobs.get();
    core->set_code_checker(
        [b](const std::string& owner, const std::string& id) { return b->HasCode(owner, id); });
    Check(core->Recover().ok(), "recover");
    auto admin = core->EnsureAdminToken();
    Check(admin.ok(), "admin token");
    admin_token = *admin;
    auto user = core->CreateUser(tide::server::AdminCaller(), "fuzz");
    Check(user.ok(), "user");
    user_token = user->second;
    auto join = core->CreateJoinToken(tide::server::AdminCaller(), "");
    Check(join.ok(), "join token");
    join_token = *join;
    core->Start();
    api = std::make_unique<tide::server::Api>(core.get(), blobs.get(), tide::SystemClock::Default());
    tide::server::Api* a = api.get();
    http = std::make_unique<tide::server::HttpServer>(
        [a](const tide::server::Request& r) { return a->Handle(r); }, &tide::server::Api::BodyLimit);
    auto bound = http->Listen("127.0.0.1:0");
    Check(bound.ok(), "listen");
    port = std::stoi(bound->substr(bound->rfind(':') + 1));
    std::thread([h = http.get()] { h->Serve(); }).detach();
  }
};

Server& TheServer() {
  static Server* server = new Server();  // lives until the process exits
  return *server;
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& server = TheServer();
  std::string request = tide::fuzz::Text(data, size);
  ReplaceAll(&request, "@USER@", server.user_token);
  ReplaceAll(&request, "@ADMIN@", server.admin_token);
  ReplaceAll(&request, "@JOIN@", server.join_token);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  Check(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "connect");
  timeval tv{2, 0};  // a following log stream answers for longer: stop reading
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may refuse a request before its body
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // Every answer on the connection is a status line with a status the
  // server means; none is an internal error.
  for (size_t at = answer.find("HTTP/1."); at != std::string::npos; at = answer.find("HTTP/1.", at + 1)) {
    if (at != 0 && answer.compare(at - 2, 2, "\r\n") != 0) continue;  // inside a body
    std::string status = answer.substr(at + 9, 3);
    Check(status != "500", "an internal error: " + answer.substr(0, 2000));
  }
  return 0;
}
