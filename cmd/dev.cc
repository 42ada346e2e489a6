// `tide dev [--listen ADDR] [--data-dir DIR] [--fake-gpus SPEC]`: the
// one-command start. Runs `tide server` and `tide agent` as two child
// processes of this binary (/proc/self/exe), so each keeps its own signals,
// logs and exit status, and this process only supervises them.
//
// Order of start: server (with --port-file, so port 0 works), wait for
// /healthz, read DIR/server/admin.token, make or reuse the "dev" user
// (DIR/dev.token, mode 0600), create a join token, start the agent (the join
// token travels in its environment, not its argv, so `ps` does not show it),
// wait for the node to appear, print the banner.
//
// Order of stop: the agent first (it gives its jobs their notice and reports
// them to the server), then the server. The children are in their own
// process group so a Ctrl-C at the terminal reaches only this process, which
// then stops them in that order; a second Ctrl-C kills them. PR_SET_PDEATHSIG
// stops them if this process dies without cleaning up.
#include "cmd/dev.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "api/client.h"
#include "cli/common.h"
#include "common/paths.h"
#include "common/token.h"

extern char** environ;

namespace tide::cmd {

namespace {

constexpr const char* kDefaultFakeGpus = "4xRTX4090:24GB";
constexpr int kStartTimeoutMs = 10'000;
constexpr int kAgentStopTimeoutMs = 90'000;
constexpr int kServerStopTimeoutMs = 15'000;

void Say(const std::string& line) { std::cerr << "tide dev: " << line << std::endl; }

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// SIGINT, SIGTERM and SIGCHLD are blocked in this process and collected
// with sigtimedwait, so no handler runs in the middle of anything.
class Signals {
 public:
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~Signals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

  // Waits up to `ms` for a signal; returns SIGINT or SIGTERM if one came.
  int Wait(int ms) {
    timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
    int sig = sigtimedwait(&set_, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) ++stops_;
    return sig == SIGINT || sig == SIGTERM ? sig : 0;
  }
  int stops() const { return stops_; }
  const sigset_t& old_mask() const { return old_; }

 private:
  sigset_t set_;
  sigset_t old_;
  int stops_ = 0;
};

class Child {
 public:
  Child(std::string name, pid_t pid) : name_(std::move(name)), pid_(pid) {}
  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  bool running() const { return !status_.has_value(); }

  // Reaps the child if it has exited. Returns true if it is gone.
  bool Poll() {
    if (!running()) return true;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) status_ = status;
    return !running();
  }

  void Signal(int sig) const {
    if (running()) kill(pid_, sig);
  }

  std::string Describe() const {
    if (running()) return name_ + " is running";
    if (WIFEXITED(*status_)) {
      return name_ + " exited with status " + std::to_string(WEXITSTATUS(*status_));
    }
    if (WIFSIGNALED(*status_)) {
      return name_ + " was killed by signal " + std::to_string(WTERMSIG(*status_));
    }
    return name_ + " ended";
  }

 private:
  std::string name_;
  pid_t pid_;
  std::optional<int> status_;
};

// fork + execve of this binary with `args` (argv[0] first) and `extra_env`.
Result<Child> Spawn(const std::string& name, const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env, const sigset_t& child_mask) {
  // Everything the child needs is built before fork: only async-signal-safe
  // calls happen between fork and exec.
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = extra_env;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    bool overridden = false;
    for (const auto& x : extra_env) {
      overridden = overridden || kv.substr(0, kv.find('=')) == x.substr(0, x.find('='));
    }
    if (!overridden) envp.push_back(*e);
  }
  for (auto& e : env_storage) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::Internal("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  return Child(name, pid);
}

// Stops `child` with SIGTERM, then SIGKILL after `timeout_ms` or a further Ctrl-C.
void Stop(Child& child, Signals& signals, int timeout_ms) {
  if (child.Poll()) return;
  Say("stopping " + child.name() + " (pid " + std::to_string(child.pid()) + ")");
  child.Signal(SIGTERM);
  int stops_before = signals.stops();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!child.Poll()) {
    signals.Wait(100);
    bool forced = signals.stops() > stops_before;
    if (forced || std::chrono::steady_clock::now() > deadline) {
      Say(std::string(forced ? "killing " : "timed out; killing ") + child.name());
      child.Signal(SIGKILL);
      waitpid(child.pid(), nullptr, 0);
      child.Poll();
      return;
    }
  }
}

// Real GPUs: the NVIDIA driver is loaded or NVML can be opened.
bool HasNvidiaDriver() {
  if (std::filesystem::exists("/proc/driver/nvidia")) return true;
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (nvml == nullptr) return false;
  dlclose(nvml);
  return true;
}

// How to spell this binary in the banner: "tide" if that is what PATH finds,
// else a path relative to the working directory, else the absolute path.
std::string SelfCommand() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "tide";
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      auto candidate = std::filesystem::path(p.substr(start, end - start)) / "tide";
      if (std::filesystem::equivalent(candidate, self, ec)) return "tide";
      start = end + 1;
    }
  }
  auto rel = std::filesystem::relative(self, std::filesystem::current_path(ec), ec);
  if (!ec && !rel.empty() && rel.string().rfind("..", 0) != 0) return "./" + rel.string();
  return self.string();
}

// Waits until `ready` returns true, the child dies, a stop signal comes or
// `timeout_ms` passes. Returns why it stopped waiting.
enum class WaitResult { kReady, kChildDied, kStopped, kTimeout };
template <typename Ready>
WaitResult WaitUntil(Ready ready, std::vector<Child*> children, Signals& signals, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    for (Child* c : children) {
      if (c->Poll()) return WaitResult::kChildDied;
    }
    if (ready()) return WaitResult::kReady;
    if (std::chrono::steady_clock::now() > deadline) return WaitResult::kTimeout;
    if (signals.Wait(100) != 0) return WaitResult::kStopped;
  }
}

// The "dev" user's token: reused from `path` if the server still knows it.
Result<std::string> DevUserToken(api::Client& admin, const std::string& url,
                                 const std::string& path) {
  auto saved = ReadFile(path);
  if (saved.ok() && !Trim(*saved).empty()) {
    std::string token = Trim(*saved);
    auto probe = api::Client::Create(url, token);
    if (!probe.ok()) return probe.status();
    auto page = (*probe)->Call("GET", "/v1/jobs?limit=1");
    if (page.ok()) return token;
    if (page.status().code() != Code::kUnauthenticated) return page.status();
    Say(path + " is not valid on this server any more; creating a new user");
  }
  auto user = admin.CreateUser("dev");
  if (!user.ok() && user.status().code() == Code::kConflict) {
    user = admin.CreateUser("dev-" + RandomHex(3));
  }
  if (!user.ok()) return user.status().WithContext("create user dev");
  TIDE_RETURN_IF_ERROR(WriteFileAtomic(path, user->token + "\n", 0600));
  return user->token;
}

bool AnyReadyNode(api::Client& client) {
  auto nodes = client.ListNodes();
  if (!nodes.ok()) return false;
  for (const auto& n : *nodes) {
    if (n.state == api::NodeState::kReady) return true;
  }
  return false;
}

// A one-time link into the web console as the dev user, or "" (and why,
// said) if the server would not make one.
std::string ConsoleLink(api::Client& admin, api::Client& user, const std::string& url) {
  auto who = user.Call("GET", "/v1/session");
  if (!who.ok()) return "";
  nlohmann::json body = nlohmann::json::object();
  body["user"] = (*who).value("user", "");
  auto link = admin.Call("POST", "/v1/admin/login-links", body);
  if (!link.ok()) {
    Say("no console login link: " + link.status().message());
    return "";
  }
  return url + (*link)["path"].get<std::string>();
}

void PrintBanner(const std::string& url, const std::string& token, const std::string& console,
                 const DevOptions& opts, const std::string& gpus, const Child& server,
                 const Child& agent) {
  std::string tide = SelfCommand();
  std::cout << "\n"
            << "Tide is running.\n"
            << "  console    " << (console.empty() ? url + "/" : console)
            << (console.empty() ? "" : "  (a one-time login link, for 15 minutes)") << "\n"
            << "  api        " << url << "/v1  (health: " << url << "/healthz)\n"
            << "  gpus       " << gpus << "\n"
            << "  data       " << opts.data_dir << "  (server pid " << server.pid()
            << ", agent pid " << agent.pid() << ")\n"
            << "\n"
            << "In another shell:\n"
            << "  export TIDE_SERVER=" << url << "\n"
            << "  export TIDE_TOKEN=" << token << "\n"
            << "  " << tide
            << " submit --name hello --gpus 1 -- sh -c 'echo hello from GPU "
               "$CUDA_VISIBLE_DEVICES; sleep 3'\n"
            << "  " << tide << " ls\n"
            << "  " << tide << " logs -f JOB_ID\n"
            << "\n"
            << "Press Ctrl-C to stop.\n"
            << std::endl;
}

}  // namespace

std::string LocalUrl(const std::string& listen) {
  std::string host = listen;
  std::string port;
  size_t colon = listen.rfind(':');
  if (colon != std::string::npos && listen.find(']', colon) == std::string::npos) {
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  // A wildcard address is reached locally through the loopback.
  if (host.empty() || host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]") {
    host = "127.0.0.1";
  }
  return "http://" + host + (port.empty() ? "" : ":" + port);
}

int RunDev(const DevOptions& opts) {
  namespace fs = std::filesystem;
  const std::string server_dir = (fs::path(opts.data_dir) / "server").string();
  const std::string agent_dir = (fs::path(opts.data_dir) / "agent").string();
  const std::string port_file = (fs::path(server_dir) / "listen.addr").string();
  const std::string admin_file = (fs::path(server_dir) / "admin.token").string();
  const std::string dev_token_file = (fs::path(opts.data_dir) / "dev.token").string();

  std::error_code ec;
  fs::create_directories(server_dir, ec);
  if (ec) return cli::PrintError(Status::Internal("create " + server_dir + ": " + ec.message()));
  fs::remove(port_file, ec);

  if (!opts.listen.ends_with(":0")) {
    auto other = api::Client::Create(LocalUrl(opts.listen), "");
    if (other.ok() && (*other)->Health().ok()) {
      return cli::PrintError(
          Status::Conflict("a server is already listening on " + opts.listen +
                           " (another `tide dev`?); stop it or use --listen 127.0.0.1:0"));
    }
  }

  Signals signals;
  auto server_or = Spawn("server",
                         {"tide", "server", "--listen", opts.listen, "--data-dir", server_dir,
                          "--log-level", opts.log_level, "--port-file", port_file},
                         {}, signals.old_mask());
  if (!server_or.ok()) return cli::PrintError(server_or.status());
  Child server = std::move(server_or).value();
  std::optional<Child> agent;

  // Stops what runs, in order, and gives the exit code.
  auto finish = [&](int code) {
    if (agent) Stop(*agent, signals, kAgentStopTimeoutMs);
    Stop(server, signals, kServerStopTimeoutMs);
    Say("stopped");
    return code;
  };
  auto failed_start = [&](WaitResult r, const std::string& what) {
    switch (r) {
      case WaitResult::kReady: return cli::kExitOk;
      case WaitResult::kStopped: return finish(cli::kExitOk);
      case WaitResult::kChildDied:
        Say((!server.running() || !agent ? server.Describe() : agent->Describe()) +
            " while waiting for " + what);
        return finish(cli::kExitError);
      case WaitResult::kTimeout:
        Say("timed out waiting for " + what);
        return finish(cli::kExitError);
    }
    return finish(cli::kExitError);
  };

  // 1. The server answers /healthz at the address it wrote to the port file.
  // Without that file, the --listen address is trusted only once the child
  // has outlived a failed bind, so another server already listening there is
  // never mistaken for ours.
  std::string url;
  std::unique_ptr<api::Client> probe;
  auto started = std::chrono::steady_clock::now();
  auto healthy = [&] {
    std::string addr;
    auto written = ReadFile(port_file);
    if (written.ok()) addr = Trim(*written);
    if (addr.empty() && !opts.listen.ends_with(":0") &&
        std::chrono::steady_clock::now() - started > std::chrono::seconds(3)) {
      addr = opts.listen;
    }
    if (addr.empty()) return false;
    if (url != LocalUrl(addr)) {
      url = LocalUrl(addr);
      auto c = api::Client::Create(url, "");
      if (!c.ok()) return false;
      probe = std::move(c).value();
    }
    return probe->Health().ok();
  };
  WaitResult r = WaitUntil(healthy, {&server}, signals, kStartTimeoutMs);
  if (r != WaitResult::kReady) return failed_start(r, "the server at " + opts.listen);

  // 2. Tokens: admin (written by the server), the dev user, a join token.
  std::string admin_token;
  r = WaitUntil(
      [&] {
        auto t = ReadFile(admin_file);
        if (t.ok()) admin_token = Trim(*t);
        return !admin_token.empty();
      },
      {&server}, signals, 2'000);
  if (r != WaitResult::kReady) return failed_start(r, admin_file);
  auto admin = api::Client::Create(url, admin_token);
  if (!admin.ok()) return finish(cli::PrintError(admin.status()));
  auto dev_token = DevUserToken(**admin, url, dev_token_file);
  if (!dev_token.ok()) return finish(cli::PrintError(dev_token.status()));
  auto join = (*admin)->CreateJoinToken();
  if (!join.ok()) return finish(cli::PrintError(join.status().WithContext("create join token")));

  // 3. The agent, with fake GPUs unless this machine has real ones.
  std::string fake_gpus = opts.fake_gpus;
  if (fake_gpus.empty() && !HasNvidiaDriver()) fake_gpus = kDefaultFakeGpus;
  std::vector<std::string> agent_args = {"tide",       "agent",   "--server",    url,
                                         "--data-dir", agent_dir, "--log-level", opts.log_level};
  if (!fake_gpus.empty()) {
    agent_args.push_back("--fake-gpus");
    agent_args.push_back(fake_gpus);
  }
  if (::geteuid() != 0) {
    // The sandbox gives each job a uid of its own, which takes root.
    Say("not root: jobs run as plain processes of your user (--runtime process), not sandboxed");
    agent_args.insert(agent_args.end(), {"--runtime", "process", "--insecure-process-runtime"});
  }
  auto agent_or =
      Spawn("agent", agent_args, {"TIDE_JOIN_TOKEN=" + join->token}, signals.old_mask());
  if (!agent_or.ok()) return finish(cli::PrintError(agent_or.status()));
  agent.emplace(std::move(agent_or).value());

  auto user = api::Client::Create(url, *dev_token);
  if (!user.ok()) return finish(cli::PrintError(user.status()));
  r = WaitUntil([&] { return AnyReadyNode(**user); }, {&server, &*agent}, signals, kStartTimeoutMs);
  if (r == WaitResult::kTimeout) {
    Say("the agent has not registered yet; see its log above");
  } else if (r != WaitResult::kReady) {
    return failed_start(r, "the agent to register");
  }

  PrintBanner(url, *dev_token, ConsoleLink(**admin, **user, url), opts,
              fake_gpus.empty() ? "real (NVML)" : fake_gpus + " (fake)", server, *agent);

  // 4. Supervise until asked to stop or a child dies.
  while (true) {
    if (signals.Wait(500) != 0) return finish(cli::kExitOk);
    for (Child* c : {&server, &*agent}) {
      if (c->Poll()) {
        Say(c->Describe());
        return finish(cli::kExitError);
      }
    }
  }
}

void AddDevCommand(CLI::App& app) {
  auto opts = std::make_shared<DevOptions>();
  CLI::App* cmd =
      app.add_subcommand("dev", "Run a server and a local agent (data in ./.tide): try Tide here");
  cmd->add_option("--listen", opts->listen, "Server address HOST:PORT")->capture_default_str();
  cmd->add_option("--data-dir", opts->data_dir, "Where server and agent keep their state")
      ->capture_default_str();
  cmd->add_option("--fake-gpus", opts->fake_gpus,
                  "Pretend GPUs, e.g. 4xRTX4090:24GB (default: real GPUs via NVML if "
                  "present, else 4xRTX4090:24GB)");
  cmd->add_option("--log-level", opts->log_level, "Log level of server and agent")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  cli::SetAction(cmd, [opts] { return RunDev(*opts); });
}

}  // namespace tide::cmd
