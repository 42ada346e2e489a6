#include "agent/testing/fake_agent_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>

namespace tide::agent::testing {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string UrlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

int HttpStatus(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kNotFound:
      return 404;
    case Code::kConflict:
      return 409;
    case Code::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

int IntParam(const std::map<std::string, std::string>& query, const std::string& name) {
  auto it = query.find(name);
  return it == query.end() ? 0 : std::stoi(it->second);
}

}  // namespace

// The answer to a call of the backend: its value as JSON, or its error.
template <typename T>
static FakeAgentServer::Response Answer(const Result<T>& r) {
  if (!r.ok()) return {HttpStatus(r.status().code()), api::ErrorJson(r.status()).dump()};
  return {200, api::ToJson(*r).dump()};
}

FakeAgentServer::FakeAgentServer(FakeServer* backend) : backend_(backend) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeAgentServer::~FakeAgentServer() {
  closing_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(conn_threads_);
  }
  for (auto& t : threads) t.join();
}

void FakeAgentServer::AcceptLoop() {
  while (!closing_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (closing_) return;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    conn_fds_.insert(fd);
    conn_threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeAgentServer::Serve(int fd) {
  std::string buf;
  char chunk[64 << 10];
  auto fill = [&]() {
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  };
  for (;;) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) goto done;
    }
    {
      Request req;
      std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      size_t line_end = head.find("\r\n");
      std::string line = head.substr(0, line_end);
      size_t sp1 = line.find(' ');
      size_t sp2 = line.find(' ', sp1 + 1);
      req.method = line.substr(0, sp1);
      std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      size_t q = target.find('?');
      req.path = target.substr(0, q);
      if (q != std::string::npos) {
        std::string qs = target.substr(q + 1);
        size_t start = 0;
        while (start < qs.size()) {
          size_t amp = qs.find('&', start);
          if (amp == std::string::npos) amp = qs.size();
          std::string kv = qs.substr(start, amp - start);
          size_t eq = kv.find('=');
          req.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : UrlDecode(kv.substr(eq + 1));
          start = amp + 1;
        }
      }
      size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        size_t e = head.find("\r\n", pos);
        if (e == std::string::npos) e = head.size();
        std::string h = head.substr(pos, e - pos);
        size_t colon = h.find(':');
        if (colon != std::string::npos) {
          std::string v = h.substr(colon + 1);
          while (!v.empty() && v.front() == ' ') v.erase(0, 1);
          req.headers[Lower(h.substr(0, colon))] = v;
        }
        pos = e + 2;
      }
      size_t length =
          req.headers.count("content-length") != 0 ? std::stoul(req.headers["content-length"]) : 0;
      while (buf.size() < length) {
        if (!fill()) goto done;
      }
      req.body = buf.substr(0, length);
      buf.erase(0, length);

      Response res = Handle(req);
      std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + Reason(res.status) +
                        "\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(res.body.size()) + "\r\n\r\n" + res.body;
      size_t sent = 0;
      while (sent < out.size()) {
        ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) goto done;
        sent += static_cast<size_t>(n);
      }
    }
  }
done:
  std::lock_guard<std::mutex> lock(mu_);
  conn_fds_.erase(fd);
  ::close(fd);
}

FakeAgentServer::Response FakeAgentServer::Handle(const Request& req) {
  std::string auth;
  if (auto it = req.headers.find("authorization"); it != req.headers.end()) auth = it->second;
  const std::string token = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
  auto error = [](const Status& st) {
    return Response{HttpStatus(st.code()), api::ErrorJson(st).dump()};
  };

  if (req.method == "POST" && req.path == "/v1/agent/register") {
    auto parsed = api::RegisterRequestFromJson(api::json::parse(req.body, nullptr, false));
    if (!parsed.ok()) return error(parsed.status());
    Result<Registered> r = backend_->Register(token, *parsed);
    if (!r.ok()) return error(r.status());
    return {200, api::json{{"node_id", r->node_id}, {"node_token", r->node_token}}.dump()};
  }
  if (!backend_->IsNodeToken(token)) {
    return error(backend_->down() ? Status::Unavailable("server down")
                                  : Status::Unauthenticated("bad node token"));
  }
  if (req.method == "POST" && req.path == "/v1/agent/heartbeat") {
    auto hb = api::HeartbeatFromJson(api::json::parse(req.body, nullptr, false));
    if (!hb.ok()) return error(hb.status());
    return Answer(backend_->Heartbeat(*hb));
  }
  if (req.method == "GET" && req.path == "/v1/agent/assignments") {
    return Answer(backend_->PollWork(IntParam(req.query, "wait")));
  }
  const std::string prefix = "/v1/agent/jobs/";
  if (req.path.rfind(prefix, 0) == 0) {
    std::string rest = req.path.substr(prefix.size());
    size_t slash = rest.find('/');
    if (slash != std::string::npos) {
      return HandleJob(req, UrlDecode(rest.substr(0, slash)), rest.substr(slash + 1));
    }
  }
  return error(Status::NotFound("no route " + req.method + " " + req.path));
}

FakeAgentServer::Response FakeAgentServer::HandleJob(const Request& req, const std::string& job_id,
                                                     const std::string& what) {
  auto done = [](const Status& st) {
    if (st.ok()) return Response{200, "{}"};
    return Response{HttpStatus(st.code()), api::ErrorJson(st).dump()};
  };
  const int attempt = IntParam(req.query, "attempt");
  if (req.method == "POST" && what == "events") {
    auto ev = api::JobEventFromJson(api::json::parse(req.body, nullptr, false));
    if (!ev.ok()) return done(ev.status());
    return done(backend_->PostEvent(job_id, *ev));
  }
  if (req.method == "POST" && what == "logs") {
    return done(
        backend_->PostLogs(job_id, attempt, std::stoll(req.query.at("offset")), req.body));
  }
  if (req.method == "PUT" && what == "outputs") {
    return done(backend_->PutOutput(job_id, attempt, req.query.at("path"), req.body));
  }
  if (req.method == "GET" && what == "code") {
    Result<std::string> code = backend_->GetCode(job_id);
    if (!code.ok()) return done(code.status());
    return {200, *code};
  }
  return done(Status::NotFound("no route"));
}

}  // namespace tide::agent::testing
