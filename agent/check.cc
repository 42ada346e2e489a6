#include "agent/check.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "agent/runtime/cgroup.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/sandbox.h"

namespace tide::agent {
namespace fs = std::filesystem;

namespace {

// A uid no user has, for the sandbox probe: the top of the default job range.
constexpr uid_t kCheckUid = 2000065535;

// Runs `fn` in a child process; true if it exited 0.
template <typename F>
bool InChild(F fn) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn() ? 0 : 1);
  if (pid < 0) return false;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string FindProgram(const std::string& name) {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

std::vector<CheckItem> CheckHost() {
  std::vector<CheckItem> out;
  auto layout = DetectCgroups();
  out.push_back({"cgroups", layout.ok(), layout.ok() ? layout->Describe() : layout.status().message()});
  if (layout.ok()) {
    // The probe runs in a child, as an agent would, so that this process
    // stays where it is; its subtree goes once it has exited.
    CheckItem job{"job cgroups", false, ""};
    bool kill = false;
    int p[2];
    if (::pipe(p) == 0) {
      pid_t child = ::fork();
      if (child == 0) {
        ::close(p[0]);
        std::string detail;
        bool ok = false, has_kill = false;
        auto m = CgroupManager::Create(*layout, "tide-check-" + std::to_string(::getpid()));
        if (!m.ok()) {
          detail = m.status().message() + " (jobs would run without memory, CPU and process limits)";
        } else {
          auto probe = (*m)->CreateJob("probe", {64 << 20, 0.5, 64});
          ok = probe.ok();
          detail = probe.ok() ? "a test cgroup with memory, CPU and pids limits was made and removed"
                              : probe.status().message();
          // Only cgroups below the root have cgroup.kill: look in the probe's.
          if (probe.ok() && !layout->v2_dir.empty()) {
            has_kill = fs::exists((*probe)->dirs().front() + "/cgroup.kill");
          }
        }
        std::string msg = std::string(ok ? "1" : "0") + (has_kill ? "1" : "0") + detail;
        (void)::write(p[1], msg.data(), msg.size());
        ::_exit(0);
      }
      ::close(p[1]);
      std::string msg;
      char buf[512];
      ssize_t n;
      while ((n = ::read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
      ::close(p[0]);
      if (child > 0) ::waitpid(child, nullptr, 0);
      CgroupManager::RemoveStale(*layout, "tide-check-");
      if (msg.size() >= 2) {
        job.ok = msg[0] == '1';
        kill = msg[1] == '1';
        job.detail = msg.substr(2);
      } else {
        job.detail = "the probe did not report";
      }
    }
    out.push_back(job);
    out.push_back({"cgroup.kill", kill || layout->v1_dirs.count("freezer"),
                   kill ? "the kernel empties a job's cgroup in one write"
                        : layout->v1_dirs.count("freezer") ? "missing: the v1 freezer stops a job while it is killed"
                                                           : "missing, and no v1 freezer"});
  }
  std::string bwrap = FindProgram("bwrap");
  bool bwrap_runs = !bwrap.empty() && InChild([&] {
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execl(bwrap.c_str(), "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-all", "--die-with-parent", "true", nullptr);
    return false;
  });
  out.push_back({"bubblewrap", bwrap_runs,
                 bwrap.empty() ? "not installed (Debian package bubblewrap)"
                 : bwrap_runs  ? bwrap + " runs a command in new namespaces"
                               : bwrap + " is installed but cannot make namespaces here"});
  Result<std::string> filter = JobSeccompFilter();
  // The sandbox a job gets, whole: its uid, mounts, namespaces and filter.
  std::string sandbox_why;
  bool sandbox = false;
  if (bwrap.empty()) {
    sandbox_why = "needs bubblewrap";
  } else if (::geteuid() != 0) {
    sandbox_why = "needs root, to run each job as a uid of its own";
  } else if (!filter.ok()) {
    sandbox_why = "seccomp: " + filter.status().message();
  } else {
    int fp[2];
    if (::pipe(fp) == 0) {
      ssize_t w = ::write(fp[1], filter->data(), filter->size());
      ::close(fp[1]);
      SandboxPlan plan;
      plan.uid = kCheckUid;
      plan.work_dir = "/";
      plan.seccomp_fd = fp[0];
      plan.command = {"true"};
      std::vector<std::string> args = BwrapArgs(plan);
      sandbox = w == static_cast<ssize_t>(filter->size()) && InChild([&] {
        int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0) {
          ::dup2(null, 1);
          ::dup2(null, 2);
        }
        if (::setgroups(0, nullptr) != 0 || ::setresgid(kCheckUid, kCheckUid, kCheckUid) != 0 ||
            ::setresuid(kCheckUid, kCheckUid, kCheckUid) != 0) {
          return false;
        }
        std::vector<char*> argv = {bwrap.data()};
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(bwrap.c_str(), argv.data());
        return false;
      });
      ::close(fp[0]);
      if (!sandbox) sandbox_why = "bwrap failed to start a job's sandbox as uid " + std::to_string(kCheckUid);
    }
  }
  out.push_back({"job sandbox", sandbox,
                 sandbox ? "a job's sandbox ran as uid " + std::to_string(kCheckUid) +
                               ": no capabilities, read-only system, private /tmp, no network, "
                               "seccomp"
                         : sandbox_why});
  out.push_back({"user namespaces", InChild([] { return ::unshare(CLONE_NEWUSER) == 0; }),
                 "unshare(CLONE_NEWUSER) in a child"});
  out.push_back({"pid, mount, ipc, uts namespaces",
                 InChild([] { return ::unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) == 0; }),
                 "unshare in a child (needs root, or a user namespace first)"});
  out.push_back({"network namespaces", InChild([] { return ::unshare(CLONE_NEWNET) == 0; }),
                 "unshare(CLONE_NEWNET) in a child"});
  bool seccomp = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 && fs::exists("/proc/sys/kernel/seccomp/actions_avail");
  out.push_back({"seccomp", seccomp, seccomp ? "filters are available" : "the kernel offers no seccomp filters"});
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  out.push_back({"pidfd", pidfd >= 0, pidfd >= 0 ? "pidfd_open works" : std::string("pidfd_open: ") + std::strerror(errno)});
  if (pidfd >= 0) ::close(pidfd);
  int devices = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    if (e.path().filename().string().rfind("nvidia", 0) == 0) ++devices;
  }
  out.push_back({"GPU devices", devices > 0,
                 devices > 0 ? std::to_string(devices) + " /dev/nvidia* nodes"
                             : "no /dev/nvidia* (fake GPUs only)"});
  {
    // What --runtime oci needs: runc, tide-init next to this binary, overlayfs, root.
    const char* path = std::getenv("PATH");
    auto runc = ResolveProgram("runc", path != nullptr ? path : kDefaultPath, "/");
    fs::path init = fs::read_symlink("/proc/self/exe", ec).parent_path() / "tide-init";
    std::ifstream fss("/proc/filesystems");
    std::string all((std::istreambuf_iterator<char>(fss)), std::istreambuf_iterator<char>());
    std::string why;
    if (!runc.ok()) why = "needs runc (Debian package runc)";
    else if (::access(init.c_str(), X_OK) != 0) why = "needs " + init.string();
    else if (all.find("\toverlay\n") == std::string::npos) why = "needs overlayfs";
    else if (::geteuid() != 0) why = "needs root";
    out.push_back({"oci runtime", why.empty(),
                   why.empty() ? *runc + " and " + init.string() +
                                     ": --runtime oci --image NAME=ROOTFS can run containers"
                               : why});
  }
  out.push_back({"runtime", sandbox,
                 sandbox ? "sandbox (the default) works here"
                         : "sandbox cannot run here (" + sandbox_why +
                               "): only --runtime process --insecure-process-runtime would, "
                               "and it does not contain jobs (docs/security.md)"});
  return out;
}

int RunAgentCheck() {
  size_t width = 0;
  auto items = CheckHost();
  for (const auto& i : items) width = std::max(width, i.name.size());
  for (const auto& i : items) {
    std::cout << i.name << std::string(width + 2 - i.name.size(), ' ') << (i.ok ? "yes  " : "no   ")
              << i.detail << "\n";
  }
  return 0;
}

}  // namespace tide::agent
