#include "tests/e2e/harness.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/paths.h"
#include "common/tls.h"

namespace tide::e2e {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string Shell(const std::string& line) {
  std::string out;
  FILE* p = popen((line + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Process::~Process() {
  if (Running()) {
    Signal(SIGKILL);
    Wait(std::chrono::seconds(5));
  }
}

void Process::Start(const std::vector<std::string>& argv, const std::string& log_path,
                    const std::map<std::string, std::string>& env) {
  log_path_ = log_path;
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    for (auto& [k, v] : env) {
      if (v.empty()) {
        unsetenv(k.c_str());
      } else {
        setenv(k.c_str(), v.c_str(), 1);
      }
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  status_ = -1;
}

void Process::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int Process::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pid_ = -1;
      return status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

bool Process::Running() {
  if (pid_ <= 0) return false;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return false;
  }
  return true;
}

bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

std::string ReadAll(const std::string& path) {
  auto r = ReadFile(path);
  return r.ok() ? *r : "";
}

std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() &&
         stat[close_paren + 2] == 'Z';
}

api::JobSpec Spec(const nlohmann::json& spec) {
  auto typed = api::JobSpecFromJson(spec);
  EXPECT_TRUE(typed.ok()) << spec.dump() << ": " << typed.status().ToString();
  return typed.ok() ? *typed : api::JobSpec{};
}

Result<api::Job> PostJobJson(api::Client& client, const nlohmann::json& spec) {
  auto answer = client.Call("POST", "/v1/jobs", spec);
  if (!answer.ok()) return answer.status();
  return api::JobFromJson(*answer);
}

std::string SubmitOk(api::Client& client, const nlohmann::json& spec) {
  auto job = client.SubmitJob(Spec(spec));
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? job->id : "";
}

api::Job WaitTerminal(api::Client& client, const std::string& id,
                      std::chrono::milliseconds timeout) {
  api::Job last;
  Eventually(
      [&] {
        auto j = client.GetJob(id);
        if (!j.ok()) return false;
        last = *j;
        return api::IsTerminal(j->status);
      },
      timeout);
  return last;
}

Cluster::Cluster(std::string node_timeout, bool tls)
    : node_timeout_(std::move(node_timeout)), tls_(tls) {
  dir_ = MakeTempDir("tide-e2e");
  // Sandboxed jobs run as uids of their own and must reach their directories
  // in the agents' data dirs below: enter, not list.
  ::chmod(dir_.c_str(), 0711);
  listen_ = "127.0.0.1:" + std::to_string(FreePort());
  url_ = (tls_ ? "https://" : "http://") + listen_;
}

bool Cluster::TlsByDefault() {
  const char* v = getenv("TIDE_E2E_TLS");
  return v && std::string(v) == "1";
}

Cluster::~Cluster() {
  for (auto& [name, p] : agents_) {
    if (p->Running()) p->Signal(SIGTERM);
  }
  for (auto& [name, p] : agents_) {
    if (p->Wait(std::chrono::seconds(15)) < 0 && p->Running()) p->Signal(SIGKILL);
  }
  if (server_ && server_->Running()) {
    server_->Signal(SIGTERM);
    if (server_->Wait(std::chrono::seconds(10)) < 0) server_->Signal(SIGKILL);
  }
  if (!getenv("TIDE_E2E_KEEP")) std::system(("rm -rf " + dir_).c_str());
}

void Cluster::StartServer(const std::vector<std::string>& extra_args) {
  server_ = std::make_unique<Process>();
  std::vector<std::string> argv = {TIDE_BINARY,      "server",       "--listen",
                                   listen_,          "--data-dir",   dir_ + "/server",
                                   "--node-timeout", node_timeout_};
  if (tls_) argv.push_back("--tls-self-signed");
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  server_->Start(argv, dir_ + "/server-" + std::to_string(server_starts_++) + ".log");
  if (tls_) {
    // Trust it by the pin of the key it made: every client of this process
    // and every CLI it starts reads TIDE_PIN; agents get it in the join token.
    std::string pin;
    Eventually(
        [&] {
          pin = this->pin();
          return !pin.empty();
        },
        std::chrono::seconds(20));
    if (pin.empty()) throw std::runtime_error("no TLS certificate: " + ReadAll(server_->log_path()));
    setenv("TIDE_PIN", pin.c_str(), 1);
  } else {
    unsetenv("TIDE_PIN");
  }
  auto probe = api::Client::Create(url_, "");
  bool up = Eventually([&] { return (*probe)->Health().ok(); }, std::chrono::seconds(20));
  if (!up) throw std::runtime_error("server did not start: " + ReadAll(server_->log_path()));
  // Made again each start: a restarted TLS server may present a new key.
  std::string token = Trim(ReadAll(dir_ + "/server/admin.token"));
  admin_ = std::move(api::Client::Create(url_, token)).value();
}

std::string Cluster::pin() const {
  auto info = tls::Inspect(ReadAll(dir_ + "/server/tls/cert.pem"));
  return info.ok() ? info->pin : "";
}

std::string Cluster::curl() const {
  return tls_ ? "curl -s --cacert " + dir_ + "/server/tls/cert.pem" : "curl -s";
}

std::string Cluster::admin_token() const { return Trim(ReadAll(dir_ + "/server/admin.token")); }

void Cluster::KillServer(int sig) {
  server_->Signal(sig);
  server_->Wait(std::chrono::seconds(10));
}

namespace {
constexpr int64_t kJobUidBlock = 250;
}  // namespace

int64_t Cluster::FirstJobUid() {
  // Above the agent's default range (2000000000-2000065535), below 2^31.
  return 2000100000 + (::getpid() % 4000) * kJobUidBlock;
}

std::string Cluster::JobUids() {
  return std::to_string(FirstJobUid()) + "-" + std::to_string(FirstJobUid() + kJobUidBlock - 1);
}

void Cluster::StartAgent(const std::string& name, const std::string& fake_gpus,
                         const std::vector<std::string>& extra_args) {
  if (join_token_.empty()) join_token_ = admin_->CreateJoinToken()->token;
  auto p = std::make_unique<Process>();
  std::vector<std::string> argv = {TIDE_BINARY, "agent", "--server", url_, "--data-dir",
                                   dir_ + "/agent-" + name, "--name", name, "--fake-gpus",
                                   fake_gpus, "--heartbeat-interval", "500ms"};
  // A test may bring its own join token (a provider's).
  if (std::find(extra_args.begin(), extra_args.end(), "--join-token") == extra_args.end()) {
    argv.insert(argv.end(), {"--join-token", join_token_});
  }
  // Without root there is no sandbox (a uid per job): such runs test the
  // process runtime.
  if (::geteuid() != 0 &&
      std::find(extra_args.begin(), extra_args.end(), "--runtime") == extra_args.end()) {
    argv.insert(argv.end(), {"--runtime", "process", "--insecure-process-runtime"});
  }
  if (std::find(extra_args.begin(), extra_args.end(), "--job-uids") == extra_args.end()) {
    argv.insert(argv.end(), {"--job-uids", JobUids()});
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  // An agent trusts the server by the pins of its join token alone.
  p->Start(argv, dir_ + "/agent-" + name + ".log", {{"TIDE_PIN", ""}});
  Process* agent = p.get();
  agents_[name] = std::move(p);
  bool listed = false;
  Eventually(
      [&] {
        if (!agent->Running()) return true;  // it gave up: its log says why
        auto nodes = admin_->ListNodes();
        if (!nodes.ok()) return false;
        for (auto& n : *nodes) {
          if (n.name == name && n.state == api::NodeState::kReady) return listed = true;
        }
        return false;
      },
      std::chrono::seconds(20));
  if (!listed) throw std::runtime_error("agent " + name + " did not register: " +
                                        ReadAll(dir_ + "/agent-" + name + ".log"));
}

std::string Cluster::NewUser(const std::string& name) {
  auto u = admin_->CreateUser(name);
  if (!u.ok()) throw std::runtime_error(u.status().ToString());
  return u->token;
}

std::unique_ptr<api::Client> Cluster::ClientFor(const std::string& token) const {
  return std::move(api::Client::Create(url_, token)).value();
}

CliResult Cluster::Cli(const std::vector<std::string>& args, const std::string& token,
                       const std::string& cwd) const {
  static int counter = 0;
  std::string base = dir_ + "/cli-" + std::to_string(counter++);
  Process p;
  std::vector<std::string> argv = {TIDE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  // stdout and stderr apart: run through sh to split them.
  auto quote = [](const std::string& a) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = cwd.empty() ? "" : "cd " + quote(cwd) + " && ";
  for (auto& a : argv) cmd += quote(a) + " ";
  cmd += "2>" + base + ".err";
  p.Start({"/bin/sh", "-c", cmd}, base + ".out", {{"TIDE_SERVER", url_}, {"TIDE_TOKEN", token}});
  CliResult r;
  r.exit_code = p.Wait(std::chrono::seconds(120));
  r.out = ReadAll(base + ".out");
  r.err = ReadAll(base + ".err");
  return r;
}

std::unique_ptr<Process> Cluster::CliBackground(const std::vector<std::string>& args,
                                                const std::string& token,
                                                const std::string& out_path) const {
  auto p = std::make_unique<Process>();
  std::vector<std::string> argv = {TIDE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  p->Start(argv, out_path, {{"TIDE_SERVER", url_}, {"TIDE_TOKEN", token}});
  return p;
}

std::vector<pid_t> JobProcesses(const std::string& job) {
  std::vector<pid_t> out;
  const std::string tag = "TIDE_JOB_ID=" + job;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::string env = ReadAll(e.path().string() + "/environ");
    size_t at = 0;
    while (at < env.size()) {
      size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      if (env.compare(at, end - at, tag) == 0) {
        out.push_back(std::stoi(name));
        break;
      }
      at = end + 1;
    }
  }
  return out;
}

}  // namespace tide::e2e
