#include "agent/runtime/process_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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
#include <optional>
#include <set>
#include <thread>

#include "agent/job_cpu.h"
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
  int stage;  // 0 chdir, 1 exec, 2 setup, 3 joining the job's cgroup
  int err;
};

// Everything a new job process does between the clone and its exec, as
// plain data: the child runs in the agent's memory (CLONE_VM) while the
// thread that started it waits, so it may not allocate, lock or call what
// libc coordinates across threads (its set*id wrappers signal every thread
// of the agent); it makes system calls only.
struct ChildPlan {
  const char* path = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
  const char* work_dir = nullptr;
  bool switch_uid = false, switch_gid = false;
  uid_t uid = 0;
  gid_t gid = 0;
  bool reset_oom_score = false;
  const int* inherit = nullptr;
  size_t inherit_count = 0;
  const int* cgroup_procs = nullptr;  // written "0" each: moves the child in
  size_t cgroup_procs_count = 0;
  int out_fd = -1, dev_null = -1, status_fd = -1;
  pid_t parent = 0;
};

[[noreturn]] void ChildFail(const ChildPlan& plan, int stage) {
  ChildError ce{stage, errno};
  ssize_t ignored = ::write(plan.status_fd, &ce, sizeof ce);
  (void)ignored;
  ::_exit(127);
}

int ChildMain(void* arg) {
  const ChildPlan& plan = *static_cast<const ChildPlan*>(arg);
  // Handlers first (this child has its own table, copied from the agent's),
  // then the signals the parent blocked for the clone.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  for (size_t i = 0; i < plan.cgroup_procs_count; ++i) {
    if (::write(plan.cgroup_procs[i], "0", 1) != 1) ChildFail(plan, 3);
  }
  if (::setsid() < 0) ChildFail(plan, 2);
  if (plan.switch_uid) {
    const rlimit no_core{0, 0};
    if (::setrlimit(RLIMIT_CORE, &no_core) != 0) ChildFail(plan, 2);
  }
  if (plan.reset_oom_score) {
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) ChildFail(plan, 2);
    ::close(fd);
  }
  if (plan.switch_gid && (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
                          ::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0)) {
    ChildFail(plan, 2);
  }
  if (plan.switch_uid && ::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
    ChildFail(plan, 2);
  }
  // After the uid change, which clears it.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) ChildFail(plan, 2);
  if (::getppid() != plan.parent) ::_exit(127);  // the agent already died
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (plan.dev_null >= 0 && ::dup2(plan.dev_null, 0) < 0) ChildFail(plan, 2);
  if (::dup2(plan.out_fd, 1) < 0 || ::dup2(plan.out_fd, 2) < 0) ChildFail(plan, 2);
  if (::chdir(plan.work_dir) != 0) ChildFail(plan, 0);
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  for (size_t i = 0; i < plan.inherit_count; ++i) {
    if (::fcntl(plan.inherit[i], F_SETFD, 0) != 0) ChildFail(plan, 2);
  }
  ::execve(plan.path, plan.argv, plan.envp);
  ChildFail(plan, 1);
}

// Starts ChildMain(plan) as a new process sharing no page tables with the
// agent: clone(CLONE_VM | CLONE_VFORK) suspends only the calling thread
// until the child execs or exits, and copies nothing, where a fork of the
// agent would copy its page tables and every thread would then fault on its
// own memory. Returns the pid, or -1 with errno.
pid_t SpawnChild(const ChildPlan& plan) {
  constexpr size_t kStack = 64 << 10;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  // No handler of the agent may run in the child before it has reset them.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(ChildMain, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                      const_cast<ChildPlan*>(&plan));
  int e = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStack);
  errno = e;
  return pid;
}

void ReapOrphansOf(ProcessRuntime::Shared* shared);

class ProcessImpl final : public Process {
 public:
  // `own_uid`: the uid the job runs as when it is not the agent's, so that
  // it cannot leave its cgroup; nullopt otherwise.
  ProcessImpl(pid_t pid, int out_fd, std::vector<std::string> tag,
              std::shared_ptr<ProcessRuntime::Shared> shared, std::unique_ptr<JobCgroup> cgroup,
              std::optional<uid_t> own_uid, bool own_pid_namespace)
      : pid_(pid), out_fd_(out_fd), tag_(std::move(tag)), shared_(std::move(shared)),
        cgroup_(std::move(cgroup)), own_uid_(own_uid), own_pid_namespace_(own_pid_namespace),
        exit_fd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}

  ~ProcessImpl() override {
    if (!reaped_) {
      Status st = KillTree();
      if (!st.ok()) spdlog::warn("job process {}: {}", pid_, st.ToString());
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (exit_fd_ >= 0) ::close(exit_fd_);
  }

  int pid() const override { return pid_; }
  int output_fd() const override { return out_fd_; }
  int exit_fd() const override { return reaped_ ? -1 : exit_fd_; }
  bool Contained() const override { return contained_; }

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
      const int64_t left = deadline - MonoMs();
      if (left <= 0) return std::nullopt;
      if (exit_fd_ >= 0) {
        // Readable when the process exits; woken each second to reap orphans.
        pollfd p{exit_fd_, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
      } else {
        SleepMs(std::min(step, left));
        step = std::min<int64_t>(step * 2, 50);
      }
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
    if (cgroup_ && own_uid_ && KillContained()) return Status::Ok();
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
    return ReapLeader(deadline);
  }

 private:
  // The cgroup holds every process of a job that runs as a uid of its own:
  // such a job cannot move itself out (the cgroups are root's), however it
  // left its session and process group. Once cgroup.kill has emptied it,
  // nothing of the job runs, and no scan of /proc is needed. Those of its
  // processes that were reparented to the agent are reaped. False when the
  // cgroup would not empty: the caller then hunts the tree through /proc.
  bool KillContained() {
    std::vector<pid_t> members = cgroup_->Pids();
    Status st = cgroup_->Kill();
    if (!st.ok()) {
      spdlog::warn("job process {}: {}", pid_, st.ToString());
      return false;
    }
    for (pid_t member : members) {
      if (member != pid_) ::waitpid(member, nullptr, WNOHANG);
    }
    // Processes of the job may have been handed to the agent: zombies that
    // left the cgroup before it was read, and those still exiting (the
    // kernel takes an exiting process out of its cgroups before it becomes a
    // zombie, so an empty cgroup does not mean they can be reaped yet). Each
    // child of the agent that runs as the job's uid (no other job has it) is
    // waited for and reaped. Not needed when the main process ran the job in
    // a pid namespace of its own and exited by itself once the job had: the
    // caller reaps that namespace's pid 1.
    const bool tree_gone = own_pid_namespace_ && members.empty() && exit_ && exit_->signal == 0;
    if (!tree_gone) ReapOrphansOf(shared_.get());
    const int64_t deadline = MonoMs() + 10'000;
    if (!ReapLeader(deadline).ok()) return false;
    if (!tree_gone) ReapChildrenOfUid(*own_uid_, deadline);
    contained_ = true;
    return true;
  }

  // The tree is gone; now the main process may be reaped.
  Status ReapLeader(int64_t deadline) {
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
  std::optional<uid_t> own_uid_;
  bool own_pid_namespace_ = false;
  bool contained_ = false;  // KillTree() emptied the job's cgroup
  int exit_fd_;             // pidfd of the main process; -1 without pidfds
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

  // Everything the child needs is built before the clone: the child shares
  // this process's memory until it execs, so it only makes system calls.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  ChildPlan plan;
  plan.path = program->c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.work_dir = spec.work_dir.c_str();
  plan.switch_uid = spec.uid >= 0;
  plan.switch_gid = spec.gid >= 0;
  plan.uid = static_cast<uid_t>(spec.uid);
  plan.gid = static_cast<gid_t>(spec.gid);
  plan.inherit = spec.inherit_fds.data();
  plan.inherit_count = spec.inherit_fds.size();
  // A job's uid: no core dumps to the host's handler, and no share of the
  // agent's protection from the OOM killer.
  plan.reset_oom_score = plan.switch_uid && OwnOomScoreAdj() < 0;

  int out_read = -1;
  plan.out_fd = spec.output_fd;
  if (plan.out_fd < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Internal("pipe: " + Errno(errno));
    out_read = fds[0];
    plan.out_fd = fds[1];
  }
  auto close_output = [&] {
    if (out_read >= 0) {
      ::close(out_read);
      ::close(plan.out_fd);
    }
  };
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close_output();
    return Status::Internal("pipe: " + Errno(e));
  }
  plan.status_fd = status_pipe[1];
  plan.dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // In a cgroup, the child moves itself in before it execs: nothing it
  // starts may begin outside.
  std::unique_ptr<JobCgroup> cgroup;
  std::vector<int> procs;
  if (cgroups_ != nullptr && !spec.cgroup_key.empty()) {
    CpuPhase cpu(JobPhase::kCgroup);
    auto made = cgroups_->CreateJob(spec.cgroup_key, spec.limits);
    auto opened = made.ok() ? (*made)->OpenProcs() : Result<std::vector<int>>(made.status());
    if (!opened.ok()) {
      ::close(status_pipe[0]);
      ::close(status_pipe[1]);
      if (plan.dev_null >= 0) ::close(plan.dev_null);
      close_output();
      return opened.status().WithContext("job cgroup");
    }
    cgroup = std::move(made).value();
    procs = std::move(opened).value();
  }
  plan.cgroup_procs = procs.data();
  plan.cgroup_procs_count = procs.size();
  plan.parent = ::getpid();

  CpuPhase spawning(JobPhase::kSpawn);
  pid_t pid = -1;
  int spawn_errno = 0;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);  // no reaping between clone and registration
    pid = SpawnChild(plan);
    spawn_errno = errno;
    if (pid > 0) shared_->leaders[pid] = spec.tag;
  }
  ::close(status_pipe[1]);
  if (plan.dev_null >= 0) ::close(plan.dev_null);
  if (out_read >= 0) ::close(plan.out_fd);
  for (int fd : procs) ::close(fd);
  if (pid < 0) {
    ::close(status_pipe[0]);
    if (out_read >= 0) ::close(out_read);
    return Status::Internal("clone: " + Errno(spawn_errno));
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
                       : ce.stage == 3 ? "cannot join the job's cgroup"
                                       : "cannot set up the job process";
    return Status::InvalidArgument(what + ": " + Errno(ce.err), "command");
  }
  if (out_read >= 0) ::fcntl(out_read, F_SETFL, ::fcntl(out_read, F_GETFL) | O_NONBLOCK);
  const std::optional<uid_t> own_uid =
      plan.switch_uid && plan.uid != ::geteuid() ? std::optional<uid_t>(plan.uid) : std::nullopt;
  return std::unique_ptr<Process>(
      new ProcessImpl(pid, out_read, spec.tag, shared_, std::move(cgroup), own_uid,
                      spec.own_pid_namespace));
}

}  // namespace tide::agent
