#include "agent/runtime/process_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "agent/runtime/process_tree.h"
#include "common/log.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace tide::agent {

std::string ExitStatus::ToString() const {
  if (signal != 0) {
    const char* name = strsignal(signal);
    return "signal " + std::to_string(signal) + " (" + (name != nullptr ? name : "?") + ")" +
           (oom ? ", out of memory" : "");
  }
  return "exit code " + std::to_string(exit_code) + (oom ? ", out of memory" : "");
}

struct ProcessRuntime::Shared {
  std::mutex mu;
  std::map<pid_t, std::vector<std::string>> leaders;  // live jobs: main pid -> tag
  std::set<pid_t> adopted;                            // orphans of jobs, our children now
  int64_t last_reap_ms = 0;
};

namespace {

int64_t MonoMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::string Errno(int e) { return std::strerror(e); }

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Result<std::string> ResolveProgram(const std::string& name, const std::string& path_var,
                                   const std::string& work_dir) {
  if (name.empty()) return Status::InvalidArgument("empty command", "command");
  if (name.find('/') != std::string::npos) {
    std::string path = name[0] == '/' ? name : work_dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return Status::NotFound(name + ": " + Errno(errno));
    }
    if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
      return Status::PermissionDenied(name + ": not an executable file");
    }
    return path;
  }
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    start = end + 1;
    if (dir.empty()) dir = ".";
    std::string candidate = dir[0] == '/' ? dir + "/" + name : work_dir + "/" + dir + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
  }
  return Status::NotFound(name + ": command not found (PATH=" + path_var + ")");
}

Result<std::string> ResolveJobProgram(const std::string& name, const std::string& path_var,
                                      const std::string& work_dir) {
  Result<std::string> found = ResolveProgram(name, path_var, work_dir);
  if (found.ok() || name.find('/') == std::string::npos) return found;
  return Status::NotFound(name + ": command not found or not executable");
}

namespace {
int OwnOomScoreAdj() {
  std::ifstream in("/proc/self/oom_score_adj");
  int own = 0;
  in >> own;
  return own;
}
}  // namespace

int JobOomScoreAdj() { return std::max(OwnOomScoreAdj(), 0); }

namespace {

// What a failing child tells its parent through the status pipe.
struct ChildError {
  int stage;  // 0 chdir, 1 exec, 2 setup
  int err;
};

void ReapOrphansOf(ProcessRuntime::Shared* shared);

class ProcessImpl final : public Process {
 public:
  ProcessImpl(pid_t pid, int out_fd, std::vector<std::string> tag,
              std::shared_ptr<ProcessRuntime::Shared> shared, std::unique_ptr<JobCgroup> cgroup)
      : pid_(pid), out_fd_(out_fd), tag_(std::move(tag)), shared_(std::move(shared)),
        cgroup_(std::move(cgroup)) {}

  ~ProcessImpl() override {
    if (!reaped_) {
      Status st = KillTree();
      if (!st.ok()) spdlog::warn("job process {}: {}", pid_, st.ToString());
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  int pid() const override { return pid_; }
  int output_fd() const override { return out_fd_; }

  std::optional<ExitStatus> Poll() override {
    MaybeReapOrphans();
    if (exit_ || reaped_) return exit_;
    // WNOWAIT: observe the exit but leave the zombie, so the pid (which is
    // also the job's process group and session id) cannot be reused until
    // KillTree() has ended the rest of the tree.
    siginfo_t si{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == pid_) {
      exit_ = FromSiginfo(si);
      MarkOom();
    }
    return exit_;
  }

  std::optional<ExitStatus> Wait(int64_t timeout_ms) override {
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : MonoMs() + timeout_ms;
    int64_t step = 2;
    for (;;) {
      if (auto e = Poll()) return e;
      if (MonoMs() >= deadline) return std::nullopt;
      SleepMs(step);
      step = std::min<int64_t>(step * 2, 50);
    }
  }

  Status Signal(int sig) override {
    if (reaped_) return Status::Ok();
    ::kill(-pid_, sig);
    for (const ProcInfo& p : FindJobProcesses(ListProcesses(), pid_, tag_, ::getpid())) {
      if (p.state != 'Z') ::kill(p.pid, sig);
    }
    return Status::Ok();
  }

  Status KillTree() override {
    if (reaped_) return Status::Ok();
    // Everything we have SIGKILLed, by identity. A process that is half-way
    // through exiting no longer shows its environ (so the tag no longer
    // finds it) and a zombie that left the session is found by nothing, so
    // these are followed until they are gone or reaped.
    std::map<pid_t, uint64_t> killed;
    if (cgroup_) {
      // The cgroup holds every process of the job, wherever it went. Those
      // whose parent dies with them become our zombies: remember them all.
      for (pid_t member : cgroup_->Pids()) {
        ProcInfo info;
        if (member != pid_ && ReadProcInfo(member, &info)) killed.emplace(member, info.start_time);
      }
      Status st = cgroup_->Kill();
      if (!st.ok()) spdlog::warn("job process {}: {}", pid_, st.ToString());
    }
    const pid_t self = ::getpid();
    int64_t deadline = MonoMs() + 10'000;
    int64_t step = 1;
    std::vector<pid_t> alive;
    for (;;) {
      alive.clear();
      std::map<pid_t, ProcInfo> zombies;
      for (const ProcInfo& p : FindJobProcesses(ListProcesses(), pid_, tag_, self)) {
        if (p.state == 'Z') {
          zombies[p.pid] = p;
        } else {
          alive.push_back(p.pid);
          killed.emplace(p.pid, p.start_time);
        }
      }
      for (auto it = killed.begin(); it != killed.end();) {
        ProcInfo info;
        if (!ReadProcInfo(it->first, &info) || info.start_time != it->second) {
          it = killed.erase(it);  // gone (reaped by its parent)
          continue;
        }
        if (info.state == 'Z') {
          zombies[info.pid] = info;
        } else if (std::find(alive.begin(), alive.end(), info.pid) == alive.end()) {
          alive.push_back(info.pid);
        }
        ++it;
      }
      // Zombies reparented to us are reaped (the main process waits until
      // the end). Zombies whose parent is a dying job process are reparented
      // to us when it dies: wait for that.
      bool zombies_pending = false;
      for (const auto& [pid, z] : zombies) {
        if (pid == pid_) continue;
        if (z.ppid == self) {
          ::waitpid(pid, nullptr, WNOHANG);
        } else if (killed.count(z.ppid) != 0 || z.ppid == pid_) {
          zombies_pending = true;
        }
      }
      if (alive.empty() && !zombies_pending) break;
      if (!alive.empty()) ::kill(-pid_, SIGKILL);
      for (pid_t p : alive) ::kill(p, SIGKILL);
      if (MonoMs() >= deadline) {
        std::string list;
        for (pid_t p : alive) list += (list.empty() ? "" : " ") + std::to_string(p);
        return Status::Internal("could not kill job " + std::to_string(pid_) + ": " +
                                std::to_string(alive.size()) + " process(es) survive: " + list);
      }
      SleepMs(step);
      step = std::min<int64_t>(step * 2, 20);
    }
    // The tree is gone; now the main process may be reaped.
    int status = 0;
    for (;;) {
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        if (!exit_) {
          exit_ = FromWaitStatus(status);
          MarkOom();
        }
        break;
      }
      if (r < 0 && errno != EINTR) break;  // not ours any more (ECHILD)
      if (MonoMs() >= deadline) {
        return Status::Internal("job " + std::to_string(pid_) + " does not exit after SIGKILL");
      }
      SleepMs(5);
    }
    reaped_ = true;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->leaders.erase(pid_);
    }
    return Status::Ok();
  }

 private:
  static ExitStatus FromSiginfo(const siginfo_t& si) {
    ExitStatus e;
    if (si.si_code == CLD_EXITED) {
      e.exit_code = si.si_status;
    } else {
      e.signal = si.si_status;
    }
    return e;
  }
  static ExitStatus FromWaitStatus(int status) {
    ExitStatus e;
    if (WIFEXITED(status)) {
      e.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    }
    return e;
  }
  // A job that failed after the kernel killed one of its processes for
  // memory (often a child: `sh -c` then exits 137) failed for that.
  void MarkOom() {
    if (exit_ && cgroup_ && (exit_->signal != 0 || exit_->exit_code != 0) && cgroup_->OomKilled()) {
      exit_->oom = true;
    }
  }
  void MaybeReapOrphans() {
    int64_t now = MonoMs();
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (now - shared_->last_reap_ms < 1000) return;
      shared_->last_reap_ms = now;
    }
    ReapOrphansOf(shared_.get());
  }

  pid_t pid_;
  int out_fd_;
  std::vector<std::string> tag_;
  std::shared_ptr<ProcessRuntime::Shared> shared_;
  std::optional<ExitStatus> exit_;
  bool reaped_ = false;
  std::unique_ptr<JobCgroup> cgroup_;
};

void ReapOrphansOf(ProcessRuntime::Shared* shared) {
  std::lock_guard<std::mutex> lock(shared->mu);
  if (shared->leaders.empty() && shared->adopted.empty()) return;
  std::set<pid_t> still_adopted;
  for (pid_t kid : ListOwnChildren()) {
    if (shared->leaders.count(kid) != 0) continue;
    ProcInfo info;
    if (!ReadProcInfo(kid, &info)) continue;
    bool ours = shared->adopted.count(kid) != 0 || shared->leaders.count(info.pgrp) != 0 ||
                shared->leaders.count(info.session) != 0;
    if (!ours && info.state != 'Z') {
      for (const auto& [leader, tag] : shared->leaders) {
        if (EnvironHasAll(kid, tag)) {
          ours = true;
          break;
        }
      }
    }
    if (!ours) continue;
    if (info.state == 'Z') {
      ::waitpid(kid, nullptr, WNOHANG);
    } else {
      still_adopted.insert(kid);
    }
  }
  shared->adopted = std::move(still_adopted);
}

}  // namespace

ProcessRuntime::ProcessRuntime() : shared_(std::make_shared<Shared>()) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    spdlog::warn("PR_SET_CHILD_SUBREAPER failed: {}", Errno(errno));
  }
}

ProcessRuntime::~ProcessRuntime() = default;

void ProcessRuntime::ReapOrphans() { ReapOrphansOf(shared_.get()); }

Result<std::unique_ptr<Process>> ProcessRuntime::Start(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("empty command", "command");
  struct stat st {};
  if (::stat(spec.work_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("work directory " + spec.work_dir + " does not exist");
  }

  std::map<std::string, std::string> env = spec.env;
  env.try_emplace("PATH", kDefaultPath);
  env.try_emplace("HOME", spec.work_dir);
  env.try_emplace("LANG", "C.UTF-8");
  Result<std::string> program = ResolveProgram(spec.argv[0], env["PATH"], spec.work_dir);
  if (!program.ok()) return program.status();

  // Everything the child needs is built before fork: after fork only
  // async-signal-safe calls are allowed (other threads may hold malloc locks).
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const char* work_dir = spec.work_dir.c_str();
  const char* path = program->c_str();
  const auto uid = static_cast<uid_t>(spec.uid);
  const auto gid = static_cast<gid_t>(spec.gid);
  const bool switch_uid = spec.uid >= 0;
  const bool switch_gid = spec.gid >= 0;
  const std::vector<int>& inherit = spec.inherit_fds;

  int out_read = -1;
  int out_write = spec.output_fd;
  if (out_write < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Internal("pipe: " + Errno(errno));
    out_read = fds[0];
    out_write = fds[1];
  }
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (out_read >= 0) {
      ::close(out_read);
      ::close(out_write);
    }
    return Status::Internal("pipe: " + Errno(e));
  }
  int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // In a cgroup, the child waits until it is in it: nothing it starts may
  // begin outside.
  std::unique_ptr<JobCgroup> cgroup;
  int go_pipe[2] = {-1, -1};
  if (cgroups_ != nullptr && !spec.cgroup_key.empty()) {
    auto made = cgroups_->CreateJob(spec.cgroup_key, spec.limits);
    if (!made.ok() || ::pipe2(go_pipe, O_CLOEXEC) != 0) {
      Status why = made.ok() ? Status::Internal("pipe: " + Errno(errno)) : made.status();
      ::close(status_pipe[0]);
      ::close(status_pipe[1]);
      if (dev_null >= 0) ::close(dev_null);
      if (out_read >= 0) {
        ::close(out_read);
        ::close(out_write);
      }
      return why.WithContext("job cgroup");
    }
    cgroup = std::move(made).value();
  }

  // A job's uid: no core dumps to the host's handler, and no share of the
  // agent's protection from the OOM killer.
  const std::string oom_adj = switch_uid && OwnOomScoreAdj() < 0 ? "0" : "";
  const pid_t parent = ::getpid();
  std::unique_lock<std::mutex> lock(shared_->mu);  // no reaping between fork and registration
  pid_t pid = ::fork();
  if (pid == 0) {
    // --- child ---
    ChildError ce{2, 0};
    auto fail = [&](int stage) {
      ce.stage = stage;
      ce.err = errno;
      ssize_t ignored = ::write(status_pipe[1], &ce, sizeof ce);
      (void)ignored;
      ::_exit(127);
    };
    if (go_pipe[0] >= 0) {
      ::close(go_pipe[1]);
      char go = 0;
      ssize_t got;
      do {
        got = ::read(go_pipe[0], &go, 1);
      } while (got < 0 && errno == EINTR);
      if (got != 1) ::_exit(127);  // the agent could not place it
    }
    if (::setsid() < 0) fail(2);
    if (switch_uid) {
      const rlimit no_core{0, 0};
      if (::setrlimit(RLIMIT_CORE, &no_core) != 0) fail(2);
    }
    if (!oom_adj.empty()) {
      int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, oom_adj.data(), oom_adj.size()) < 0) fail(2);
      ::close(fd);
    }
    if (switch_gid && (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0)) fail(2);
    if (switch_uid && ::setresuid(uid, uid, uid) != 0) fail(2);
    // After the uid change, which clears it.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(2);
    if (::getppid() != parent) ::_exit(127);  // the agent already died
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    if (dev_null >= 0 && ::dup2(dev_null, 0) < 0) fail(2);
    if (::dup2(out_write, 1) < 0 || ::dup2(out_write, 2) < 0) fail(2);
    if (::chdir(work_dir) != 0) fail(0);
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    for (int fd : inherit) {
      if (::fcntl(fd, F_SETFD, 0) != 0) fail(2);
    }
    ::execve(path, argv.data(), envp.data());
    fail(1);
  }
  int fork_errno = errno;
  if (pid > 0) shared_->leaders[pid] = spec.tag;
  lock.unlock();

  ::close(status_pipe[1]);
  if (dev_null >= 0) ::close(dev_null);
  if (out_read >= 0) ::close(out_write);
  if (go_pipe[0] >= 0) ::close(go_pipe[0]);
  if (pid < 0) {
    ::close(status_pipe[0]);
    if (go_pipe[1] >= 0) ::close(go_pipe[1]);
    if (out_read >= 0) ::close(out_read);
    return Status::Internal("fork: " + Errno(fork_errno));
  }
  if (cgroup) {
    Status added = cgroup->Add(pid);
    if (added.ok()) {
      ssize_t w = ::write(go_pipe[1], "g", 1);
      if (w != 1) added = Status::Internal("start the job: " + Errno(errno));
    }
    ::close(go_pipe[1]);  // without the byte the child exits
    if (!added.ok()) {
      // Killed, not waited for: a child of another Start may hold a copy
      // of our pipe's write end, so ours might never see its end.
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      {
        std::lock_guard<std::mutex> guard(shared_->mu);
        shared_->leaders.erase(pid);
      }
      ::close(status_pipe[0]);
      if (out_read >= 0) ::close(out_read);
      return added.WithContext("job cgroup");
    }
  }

  ChildError ce{};
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &ce, sizeof ce);
  } while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    {
      std::lock_guard<std::mutex> guard(shared_->mu);
      shared_->leaders.erase(pid);
    }
    if (out_read >= 0) ::close(out_read);
    std::string what = ce.stage == 0   ? "cannot enter work directory " + spec.work_dir
                       : ce.stage == 1 ? "cannot execute " + spec.argv[0]
                                       : "cannot set up the job process";
    return Status::InvalidArgument(what + ": " + Errno(ce.err), "command");
  }
  if (out_read >= 0) ::fcntl(out_read, F_SETFL, ::fcntl(out_read, F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<Process>(new ProcessImpl(pid, out_read, spec.tag, shared_, std::move(cgroup)));
}

}  // namespace tide::agent
