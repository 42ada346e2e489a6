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

std::string ErrorBody(const std::string& code, const std::string& msg) {
  return api::json{{"error", {{"code", code}, {"message", msg}}}}.dump();
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

}  // namespace

FakeAgentServer::FakeAgentServer() {
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
  cv_.notify_all();
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

  std::unique_lock<std::mutex> lock(mu_);
  if (down_) return {503, ErrorBody("unavailable", "server down")};

  if (req.method == "POST" && req.path == "/v1/agent/register") {
    if (token == kJoinToken) {
      ++joins_;
      std::string node_token = "tide_n_test" + std::to_string(joins_);
      node_tokens_.insert(node_token);
      return {
          200,
          api::json{{"node_id", "n-" + std::to_string(joins_)}, {"node_token", node_token}}.dump()};
    }
    if (node_tokens_.count(token) != 0 && !revoked_) {
      ++re_registrations_;
      return {200,
              api::json{{"node_id", "n-" + token.substr(strlen("tide_n_test"))}, {"node_token", ""}}
                  .dump()};
    }
    return {401, ErrorBody("unauthenticated", "bad token")};
  }
  if (node_tokens_.count(token) == 0 || revoked_) {
    return {401, ErrorBody("unauthenticated", "bad node token")};
  }
  if (req.method == "POST" && req.path == "/v1/agent/heartbeat") {
    auto hb = api::HeartbeatFromJson(api::json::parse(req.body, nullptr, false));
    if (!hb.ok()) return {400, ErrorBody("invalid_argument", hb.status().message())};
    last_heartbeat_ = *hb;
    ++heartbeats_;
    api::AgentWork work;
    work.cancels.swap(cancels_);
    return {200, api::ToJson(work).dump()};
  }
  if (req.method == "GET" && req.path == "/v1/agent/assignments") {
    int wait_s = req.query.count("wait") ? std::stoi(req.query.at("wait")) : 0;
    // Answer within a second at most, so tests and shutdown stay quick.
    cv_.wait_for(lock, std::chrono::milliseconds(std::min(wait_s, 1) * 1000),
                 [this] { return !assignments_.empty() || closing_; });
    api::AgentWork work;
    while (!assignments_.empty()) {
      work.assignments.push_back({assignments_.front(), {}});
      assignments_.pop_front();
    }
    return {200, api::ToJson(work).dump()};
  }
  const std::string prefix = "/v1/agent/jobs/";
  if (req.path.rfind(prefix, 0) == 0) {
    std::string rest = req.path.substr(prefix.size());
    size_t slash = rest.find('/');
    if (slash != std::string::npos) {
      std::string job_id = UrlDecode(rest.substr(0, slash));
      if (rejected_.count(job_id) != 0) return {404, ErrorBody("not_found", "no such job")};
      lock.unlock();
      return HandleJob(req, job_id, rest.substr(slash + 1));
    }
  }
  return {404, ErrorBody("not_found", "no route " + req.method + " " + req.path)};
}

FakeAgentServer::Response FakeAgentServer::HandleJob(const Request& req, const std::string& job_id,
                                                     const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (req.method == "POST" && what == "events") {
    if (fail_events_ > 0) {
      --fail_events_;
      return {503, ErrorBody("unavailable", "restarting")};
    }
    auto ev = api::JobEventFromJson(api::json::parse(req.body, nullptr, false));
    if (!ev.ok()) return {400, ErrorBody("invalid_argument", ev.status().message())};
    events_[job_id].push_back(*ev);
    return {200, "{}"};
  }
  if (req.method == "POST" && what == "logs") {
    ++log_posts_;
    std::string& log = logs_[job_id + "#" + req.query.at("attempt")];
    size_t offset = std::stoul(req.query.at("offset"));
    if (offset > log.size()) return {409, ErrorBody("conflict", "offset beyond end")};
    if (offset + req.body.size() > log.size()) log += req.body.substr(log.size() - offset);
    return {200, "{}"};
  }
  if (req.method == "PUT" && what == "outputs") {
    outputs_[job_id + "#" + req.query.at("attempt")][req.query.at("path")] = req.body;
    return {200, "{}"};
  }
  if (req.method == "GET" && what == "code") {
    auto it = code_.find(job_id);
    if (it == code_.end()) return {404, ErrorBody("not_found", "no code")};
    return {200, it->second};
  }
  return {404, ErrorBody("not_found", "no route")};
}

void FakeAgentServer::Assign(const api::Job& job) {
  std::lock_guard<std::mutex> lock(mu_);
  assignments_.push_back(job);
  cv_.notify_all();
}

void FakeAgentServer::Cancel(const api::CancelOrder& order) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(order);
}

void FakeAgentServer::SetCode(const std::string& job_id, std::string archive) {
  std::lock_guard<std::mutex> lock(mu_);
  code_[job_id] = std::move(archive);
}

void FakeAgentServer::SetDown(bool down) {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = down;
}

void FakeAgentServer::FailEvents(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_events_ = n;
}

void FakeAgentServer::RejectJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_.insert(job_id);
}

void FakeAgentServer::LoseLog(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  logs_[job_id + "#" + std::to_string(attempt)].clear();
}

void FakeAgentServer::RevokeNodeTokens() {
  std::lock_guard<std::mutex> lock(mu_);
  revoked_ = true;
}

std::vector<api::JobEvent> FakeAgentServer::Events(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return events_[job_id];
}

std::string FakeAgentServer::Log(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return logs_[job_id + "#" + std::to_string(attempt)];
}

std::map<std::string, std::string> FakeAgentServer::Outputs(const std::string& job_id,
                                                            int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return outputs_[job_id + "#" + std::to_string(attempt)];
}

api::Heartbeat FakeAgentServer::LastHeartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_heartbeat_;
}

int FakeAgentServer::heartbeats() {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeats_;
}

int FakeAgentServer::joins() {
  std::lock_guard<std::mutex> lock(mu_);
  return joins_;
}

int FakeAgentServer::re_registrations() {
  std::lock_guard<std::mutex> lock(mu_);
  return re_registrations_;
}

int FakeAgentServer::log_posts() {
  std::lock_guard<std::mutex> lock(mu_);
  return log_posts_;
}

bool FakeAgentServer::WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace tide::agent::testing
