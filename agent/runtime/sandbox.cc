#include "agent/runtime/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "agent/job_cpu.h"
#include "agent/runtime/process_tree.h"
#include "common/clock.h"
#include "common/log.h"

namespace tide::agent {

namespace {

std::string Errno(int e) { return std::strerror(e); }

bool ParseUid(const std::string& s, uid_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 0xFFFFFFFFull) return false;  // (uid_t)-1 means "unchanged"
  *out = static_cast<uid_t>(v);
  return true;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsSymlink(const std::string& path, std::string* target) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  *target = std::string(buf, static_cast<size_t>(n));
  return true;
}

// Whether `path` is `dir` or below it (both normalised, absolute).
bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

}  // namespace

// ---------------------------------------------------------------- uid sweeps

namespace {
// Sends `sig` to `pid` only if it still runs as `uid` once pinned by a
// pidfd: a job process that exits and whose pid is reused by another
// between the look at /proc and the kill is never hit.
void SignalPinned(const char* pid_name, uid_t uid, int sig) {
  const auto pid = static_cast<pid_t>(std::atol(pid_name));
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno == ENOSYS) ::kill(pid, sig);  // kernels before 5.3
    return;
  }
  if (ProbeUid(pid, uid).runs_as) ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
  ::close(fd);
}
}  // namespace

Status KillUid(uid_t uid) {
  const pid_t self = ::getpid();
  for (int round = 0; round < 250; ++round) {
    int found = 0;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return Status::Internal("open /proc: " + Errno(errno));
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      const auto pid = static_cast<pid_t>(std::atol(e->d_name));
      if (pid == self) continue;  // the agent reading a job's files as its fsuid
      UidProbe p = ProbeUid(pid, uid);
      if (!p.runs_as) continue;
      if (p.zombie) {
        if (p.ppid == self) ::waitpid(pid, nullptr, WNOHANG);
        continue;
      }
      ++found;
      SignalPinned(e->d_name, uid, SIGKILL);
    }
    ::closedir(d);
    if (found == 0) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Internal("processes running as uid " + std::to_string(uid) + " survive SIGKILL");
}

Status SignalUid(uid_t uid, pid_t monitor, int sig) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return Status::Internal("open /proc: " + Errno(errno));
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const auto pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid == ::getpid()) continue;
    UidProbe p = ProbeUid(pid, uid);
    if (!p.runs_as || p.zombie || pid == monitor || p.ppid == monitor) continue;
    SignalPinned(e->d_name, uid, sig);
  }
  ::closedir(d);
  return Status::Ok();
}

namespace {
uid_t g_chown_uid = 0;  // nftw has no user pointer; GiveTree holds chown_mu
std::mutex chown_mu;

int ChownOne(const char* path, const struct stat*, int, struct FTW*) {
  return ::lchown(path, g_chown_uid, g_chown_uid) == 0 ? 0 : errno;
}

}  // namespace

Status GiveTree(const std::string& path, uid_t uid) {
  std::lock_guard<std::mutex> lock(chown_mu);
  g_chown_uid = uid;
  int r = ::nftw(path.c_str(), ChownOne, 32, FTW_PHYS | FTW_MOUNT);
  if (r != 0) return Status::Internal("chown " + path + ": " + Errno(r > 0 ? r : errno));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::Internal("stat " + path + ": " + Errno(errno));
  if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    if (::chmod(path.c_str(), S_ISDIR(st.st_mode) ? 0700 : 0600) != 0) {
      return Status::Internal("chmod " + path + ": " + Errno(errno));
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- uid range

Result<UidRange> ParseUidRange(const std::string& text, const std::string& passwd,
                               const std::string& group) {
  size_t dash = text.find('-');
  UidRange r;
  if (dash == std::string::npos || !ParseUid(text.substr(0, dash), &r.first) ||
      !ParseUid(text.substr(dash + 1), &r.last)) {
    return Status::InvalidArgument("--job-uids: want FIRST-LAST (e.g. 2000000000-2000065535), got \"" +
                                   text + "\"");
  }
  if (r.first == 0) return Status::InvalidArgument("--job-uids: uid 0 is root, not a job's uid");
  if (r.last < r.first) {
    return Status::InvalidArgument("--job-uids: " + text + " ends before it starts");
  }
  // A job's gid is its uid: the range may hold no user and no group.
  for (const auto& [file, what] : {std::pair{passwd, "uid"}, std::pair{group, "gid"}}) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      // name:password:ID:...
      size_t a = line.find(':');
      size_t b = a == std::string::npos ? a : line.find(':', a + 1);
      size_t c = b == std::string::npos ? b : line.find(':', b + 1);
      uid_t id;
      if (c == std::string::npos || !ParseUid(line.substr(b + 1, c - b - 1), &id)) continue;
      if (id >= r.first && id <= r.last) {
        return Status::InvalidArgument("--job-uids: " + text + " holds " + what + " " +
                                       std::to_string(id) + " of " +
                                       (file == passwd ? "user " : "group ") + line.substr(0, a) +
                                       " (" + file + "); jobs need ids nobody else has");
      }
    }
  }
  return r;
}

namespace {
constexpr char kUidFree[] = "free\n";  // the lock file of a uid nothing runs as
constexpr char kUidHeld[] = "held\n";

void MarkLockFile(int fd, const char* mark) {
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mark, std::strlen(mark), 0) < 0) {
    spdlog::warn("uid lock file: {}", Errno(errno));
  }
}
}  // namespace

UidLease::~UidLease() {
  CpuPhase cpu(JobPhase::kUid);
  // Nothing of the job may outlive its claim on the uid.
  Status st = empty_ ? Status::Ok() : KillUid(uid_);
  if (!st.ok()) spdlog::warn("release uid {}: {}", uid_, st.ToString());
  if (fd_ < 0) return;
  if (st.ok()) MarkLockFile(fd_, kUidFree);
  ::close(fd_);  // drops the flock
  if (st.ok() && released_) released_(uid_);
}

UidPool::UidPool(UidRange range, std::string lock_dir)
    : range_(range), lock_dir_(std::move(lock_dir)), shared_(std::make_shared<Shared>()) {
  shared_->next = range.first;
}

// Locks `uid`'s file; `*held` when another job, maybe of another agent,
// holds it. A uid whose last holder saw it empty needs no sweep; any other
// (a holder that died, a new lock file) is swept before a job gets it.
Result<std::unique_ptr<UidLease>> UidPool::TryClaim(uid_t uid, bool* held) {
  *held = false;
  std::string path = lock_dir_ + "/" + std::to_string(uid) + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::Internal("open " + path + ": " + Errno(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    *held = true;
    return Status::Unavailable("held");
  }
  char mark[sizeof kUidFree] = {};
  const bool free = ::pread(fd, mark, sizeof mark - 1, 0) == sizeof mark - 1 &&
                    std::strcmp(mark, kUidFree) == 0;
  Status killed = free ? Status::Ok() : KillUid(uid);
  if (!killed.ok()) {
    ::close(fd);
    return killed;
  }
  MarkLockFile(fd, kUidHeld);
  std::weak_ptr<Shared> pool = shared_;
  return std::make_unique<UidLease>(uid, fd, [pool](uid_t u) {
    if (auto s = pool.lock()) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->released.push_back(u);
    }
  });
}

Result<std::unique_ptr<UidLease>> UidPool::Claim() {
  CpuPhase cpu(JobPhase::kUid);
  bool held = false;
  // The uids this pool let go of, newest first: marked free, so no sweep.
  for (;;) {
    uid_t uid;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->released.empty()) break;
      uid = shared_->released.back();
      shared_->released.pop_back();
    }
    auto lease = TryClaim(uid, &held);
    if (lease.ok() || !held) return lease;  // or another agent took it since
  }
  const uint64_t size = static_cast<uint64_t>(range_.last) - range_.first + 1;
  for (uint64_t i = 0; i < size; ++i) {
    uid_t uid;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      uid = shared_->next;
      shared_->next = uid == range_.last ? range_.first : uid + 1;
    }
    auto lease = TryClaim(uid, &held);
    if (lease.ok() || !held) return lease;
  }
  return Status::Unavailable("every uid of the job range " + std::to_string(range_.first) + "-" +
                             std::to_string(range_.last) + " is in use");
}

// ---------------------------------------------------------------- bwrap

std::vector<std::string> BwrapArgs(const SandboxPlan& plan, const std::string& system_root) {
  std::vector<std::string> a = {"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                "--unshare-cgroup-try"};
  if (!plan.network) a.push_back("--unshare-net");
  const std::string id = std::to_string(plan.uid);
  a.insert(a.end(), {"--uid", id, "--gid", id, "--die-with-parent", "--new-session", "--cap-drop",
                     "ALL"});
  if (!plan.hostname.empty()) a.insert(a.end(), {"--hostname", plan.hostname});

  // The system, read-only. Merged-/usr hosts have /bin -> usr/bin links.
  for (const char* dir : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                          "/opt", "/srv"}) {
    std::string host = system_root + dir;
    std::string target;
    if (IsSymlink(host, &target)) {
      a.insert(a.end(), {"--symlink", target, dir});
    } else if (IsDir(host)) {
      a.insert(a.end(), {"--ro-bind", dir, dir});
    }
  }
  // Drivers and libraries read /sys (CUDA, NUMA, CPU topology).
  a.insert(a.end(), {"--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev", "--tmpfs",
                     "/dev/shm", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"});
  if (plan.network && IsDir(system_root + "/run/systemd/resolve")) {
    // /etc/resolv.conf often points here.
    a.insert(a.end(), {"--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve"});
  }
  for (const std::string& h : plan.hidden) a.insert(a.end(), {"--tmpfs", h});
  for (const std::string& p : plan.readable) a.insert(a.end(), {"--ro-bind", p, p});
  for (const std::string& p : plan.writable) a.insert(a.end(), {"--bind", p, p});
  for (const auto& [host, inside] : plan.devices) a.insert(a.end(), {"--dev-bind", host, inside});
  // The sandbox's own root and the tmpfs over the data dir take no writes:
  // what a job writes goes to its directories, /tmp, /var/tmp or /dev/shm.
  for (const std::string& h : plan.hidden) a.insert(a.end(), {"--remount-ro", h});
  a.insert(a.end(), {"--remount-ro", "/dev", "--remount-ro", "/"});
  if (plan.seccomp_fd >= 0) a.insert(a.end(), {"--seccomp", std::to_string(plan.seccomp_fd)});
  if (plan.info_fd >= 0) a.insert(a.end(), {"--info-fd", std::to_string(plan.info_fd)});
  a.insert(a.end(), {"--chdir", plan.work_dir, "--"});
  a.insert(a.end(), plan.command.begin(), plan.command.end());
  return a;
}

// ---------------------------------------------------------------- seccomp

const std::vector<const char*> kJobRefusedSyscalls = {
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "mount", "umount", "umount2",
    "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "add_key", "request_key", "keyctl", "bpf", "perf_event_open",
    "userfaultfd", "unshare", "setns", "reboot", "swapon", "swapoff", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "open_by_handle_at", "name_to_handle_at",
    "acct", "quotactl", "syslog", "lookup_dcookie", "uselib", "iopl", "ioperm", "vhangup",
    "fanotify_init", "pidfd_getfd", "process_madvise"};
const std::vector<uint64_t> kJobRefusedCloneFlags = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,
                                                     CLONE_NEWNET,  CLONE_NEWIPC, CLONE_NEWUTS,
                                                     CLONE_NEWCGROUP};

Result<std::string> JobSeccompFilter() {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return Status::Internal("seccomp_init failed");
  struct Ctx {
    scmp_filter_ctx c;
    ~Ctx() { ::seccomp_release(c); }
  } guard{ctx};
  // Calls of other ABIs (x32, i386 on x86_64) would dodge the rules.
  ::seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);

  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kJobRefusedSyscalls) {
    int nr = ::seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (::seccomp_rule_add(ctx, eperm, nr, 0) != 0) {
      return Status::Internal(std::string("seccomp rule for ") + name);
    }
  }
  // clone with a namespace flag; clone3 hides its flags in memory, so it
  // answers ENOSYS and libc falls back to clone.
  for (uint64_t flag : kJobRefusedCloneFlags) {
    if (::seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) !=
        0) {
      return Status::Internal("seccomp rule for clone");
    }
  }
  int clone3 = ::seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR && ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0) != 0) {
    return Status::Internal("seccomp rule for clone3");
  }
  // Typing into the terminal of whoever reads the job's output.
  if (::seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)) != 0) {
    return Status::Internal("seccomp rule for ioctl");
  }

  int fd = ::memfd_create("tide-seccomp", MFD_CLOEXEC);
  if (fd < 0) return Status::Internal("memfd_create: " + Errno(errno));
  int r = ::seccomp_export_bpf(ctx, fd);
  std::string bpf;
  if (r == 0) {
    ::lseek(fd, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) bpf.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (r != 0 || bpf.empty()) return Status::Internal("seccomp_export_bpf: " + Errno(-r));
  return bpf;
}

// ---------------------------------------------------------------- runtime

std::optional<ExitStatus> FromShellCode(std::optional<ExitStatus> e) {
  if (e && e->signal == 0 && e->exit_code > 128 && e->exit_code < 128 + NSIG) {
    e->signal = e->exit_code - 128;
    e->exit_code = 0;
  }
  return e;
}

UidJobProcess::UidJobProcess(std::unique_ptr<Process> inner, std::unique_ptr<UidLease> uid,
                             std::string what, std::function<void()> after_kill, int info_fd)
    : inner_(std::move(inner)), uid_(std::move(uid)), what_(std::move(what)),
      after_kill_(std::move(after_kill)), info_fd_(info_fd) {}

UidJobProcess::~UidJobProcess() {
  if (Status st = KillTree(); !st.ok()) spdlog::warn("{} {}: {}", what_, pid(), st.ToString());
  inner_.reset();
  if (info_fd_ >= 0) ::close(info_fd_);
}

pid_t UidJobProcess::NamespaceInit() {
  if (ns_init_ != 0 || info_fd_ < 0) return ns_init_ != 0 ? ns_init_ : -1;
  // {"child-pid": 1234, ...}, written once bwrap has made its pid 1. By the
  // time the job has ended it is there, or bwrap died before (EOF or
  // nothing to read).
  char buf[512];
  ssize_t n = ::read(info_fd_, buf, sizeof buf - 1);
  ns_init_ = -1;
  if (n > 0) {
    buf[n] = '\0';
    const char* at = std::strstr(buf, "\"child-pid\":");
    if (at != nullptr) {
      long pid = std::strtol(at + std::strlen("\"child-pid\":"), nullptr, 10);
      if (pid > 0) ns_init_ = static_cast<pid_t>(pid);
    }
  }
  return ns_init_;
}

void UidJobProcess::ReapNamespaceInit() {
  const int64_t deadline = SystemClock::Default()->MonotonicMs() + 10'000;
  if (pid_t init = NamespaceInit(); init > 0) {
    (void)ReapChildOfUid(init, uid_->uid(), deadline);
  } else {
    ReapChildrenOfUid(uid_->uid(), deadline);  // its pid is unknown: any of the uid
  }
}

std::optional<ExitStatus> UidJobProcess::Poll() { return FromShellCode(inner_->Poll()); }

std::optional<ExitStatus> UidJobProcess::Wait(int64_t timeout_ms) {
  return FromShellCode(inner_->Wait(timeout_ms));
}

Status UidJobProcess::Signal(int sig) { return SignalUid(uid_->uid(), inner_->pid(), sig); }

Status UidJobProcess::KillTree() {
  // The monitor, and through the job's cgroup everything in it.
  Status st = inner_->KillTree();
  // What a tree walk cannot see (a pid 1 that outlived its monitor, its
  // zombie) still runs as the job's uid; an emptied cgroup has shown that
  // nothing does.
  Status swept = Status::Ok();
  if (inner_->Contained()) {
    if (info_fd_ >= 0) ReapNamespaceInit();
    uid_->MarkEmpty();
  } else {
    swept = KillUid(uid_->uid());
  }
  if (after_kill_) after_kill_();
  return st.ok() ? swept : st;
}

SandboxRuntime::SandboxRuntime(SandboxOptions options, ProcessRuntime* processes)
    : options_(std::move(options)), processes_(processes),
      uids_(options_.uids, options_.lock_dir) {}

Result<std::unique_ptr<SandboxRuntime>> SandboxRuntime::Create(SandboxOptions options,
                                                               ProcessRuntime* processes) {
  if (options.bwrap.empty()) {
    const char* path = std::getenv("PATH");
    auto found = ResolveProgram("bwrap", path != nullptr ? path : kDefaultPath, "/");
    if (found.ok()) options.bwrap = *found;
  }
  if (options.bwrap.empty() || ::access(options.bwrap.c_str(), X_OK) != 0) {
    return Status::Unavailable(
        "the sandbox runtime needs bubblewrap (Debian package bubblewrap): bwrap not found");
  }
  if (::geteuid() != 0) {
    return Status::Unavailable(
        "the sandbox runtime runs each job as a uid of its own, which needs root; run the agent "
        "as root, or use --runtime process --insecure-process-runtime for development");
  }
  if (options.uids.first == 0) return Status::InvalidArgument("--job-uids: no range given");
  std::error_code ec;
  std::filesystem::create_directories(options.lock_dir, ec);
  if (ec) return Status::Internal("create " + options.lock_dir + ": " + ec.message());
  ::chmod(options.lock_dir.c_str(), 0700);
  // bwrap, running as the job's uid, must reach the job's directories: the
  // directories above the data dir must be searchable by everyone; the data
  // dir itself is searchable but not listable, and nothing in it but the
  // job's own directories is bound into the sandbox.
  for (const std::string& dir : options.hidden) {
    std::filesystem::path p(dir);
    for (auto up = p.parent_path(); !up.empty(); up = up.parent_path()) {
      struct stat st {};
      if (::stat(up.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
        return Status::Unavailable(
            "the data dir " + dir + " lies under " + up.string() +
            ", which other users cannot enter (mode " + [&] {
              char m[8];
              std::snprintf(m, sizeof m, "%04o", st.st_mode & 07777);
              return std::string(m);
            }() + "); jobs run as their own uid and must reach their directories: use a data dir "
                  "elsewhere (e.g. /var/lib/tide-agent) or chmod o+x " + up.string());
      }
      if (up == up.root_path()) break;
    }
    ::chmod(dir.c_str(), 0711);
  }
  auto rt = std::unique_ptr<SandboxRuntime>(new SandboxRuntime(std::move(options), processes));
  Result<std::string> filter = JobSeccompFilter();
  if (!filter.ok()) return filter.status().WithContext("seccomp");
  rt->filter_ = std::move(*filter);
  return rt;
}

Result<std::unique_ptr<Process>> SandboxRuntime::Start(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("empty command", "command");
  std::map<std::string, std::string> env = spec.env;
  env.try_emplace("PATH", kDefaultPath);
  // The host's view is the sandbox's for the system directories and the job's
  // own: a program that cannot be found is a start failure, as without one.
  Result<std::string> program = ResolveJobProgram(spec.argv[0], env["PATH"], spec.work_dir);
  if (!program.ok()) return program.status();

  Result<std::unique_ptr<UidLease>> lease = uids_.Claim();
  if (!lease.ok()) return lease.status();
  const uid_t uid = (*lease)->uid();

  SandboxPlan plan;
  plan.uid = uid;
  plan.work_dir = spec.work_dir;
  plan.writable = spec.writable;
  plan.readable = spec.readable;
  plan.hidden = options_.hidden;
  plan.network = spec.network;
  plan.hostname = spec.hostname;
  plan.command = spec.argv;
  for (const std::string& dev : spec.devices) {
    std::string host = options_.gpu_dev_root + "/" + dev;
    struct stat st {};
    if (::stat(host.c_str(), &st) != 0) continue;  // e.g. fake GPUs: nothing to bind
    plan.devices.emplace_back(host, "/dev/" + dev);
  }
  {
    CpuPhase cpu(JobPhase::kHandOver);
    for (const std::string& p : spec.writable) {
      TIDE_RETURN_IF_ERROR(GiveTree(p, uid));
      // Every directory between the data dir and the path: enter, not list.
      for (const std::string& root : options_.hidden) {
        if (!IsUnder(p, root)) continue;
        for (std::filesystem::path up = std::filesystem::path(p).parent_path();
             up.string().size() > root.size(); up = up.parent_path()) {
          ::chmod(up.c_str(), 0711);
        }
      }
    }
  }

  // The filter travels in a pipe the child inherits, read by bwrap; bwrap
  // names its pid 1 in another.
  int filter_pipe[2];
  if (::pipe2(filter_pipe, O_CLOEXEC) != 0) return Status::Internal("pipe: " + Errno(errno));
  ssize_t w = ::write(filter_pipe[1], filter_.data(), filter_.size());
  ::close(filter_pipe[1]);
  if (w != static_cast<ssize_t>(filter_.size())) {
    ::close(filter_pipe[0]);
    return Status::Internal("write the seccomp filter: " + Errno(errno));
  }
  plan.seccomp_fd = filter_pipe[0];
  int info_pipe[2];
  if (::pipe2(info_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(filter_pipe[0]);
    return Status::Internal("pipe: " + Errno(errno));
  }
  plan.info_fd = info_pipe[1];

  LaunchSpec outer = spec;
  outer.argv = {options_.bwrap};
  for (std::string& arg : BwrapArgs(plan)) outer.argv.push_back(std::move(arg));
  outer.env = std::move(env);
  outer.uid = static_cast<int64_t>(uid);
  outer.gid = static_cast<int64_t>(uid);
  outer.inherit_fds = {filter_pipe[0], info_pipe[1]};
  outer.own_pid_namespace = true;
  Result<std::unique_ptr<Process>> started = processes_->Start(outer);
  ::close(filter_pipe[0]);
  ::close(info_pipe[1]);
  if (!started.ok()) {
    ::close(info_pipe[0]);
    return started.status();
  }
  return std::unique_ptr<Process>(new UidJobProcess(std::move(*started), std::move(*lease),
                                                    "sandboxed job", nullptr, info_pipe[0]));
}

}  // namespace tide::agent
