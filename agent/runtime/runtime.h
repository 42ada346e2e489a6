// Runtime: how the agent starts a job's processes and makes sure that
// nothing of a job survives it.
//
// A Runtime starts one job from a LaunchSpec and hands back a Process, the
// handle through which the agent watches, signals and kills the job's whole
// process tree. ProcessRuntime (runtime/process_runtime.h) is the plain
// fork/exec implementation; sandboxed and container runtimes plug in here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/runtime/cgroup.h"
#include "common/status.h"

namespace tide::agent {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in the job's PATH
  // Variables of the job. The runtime adds sane PATH, HOME (the work dir) and
  // LANG when they are missing; nothing of the agent's environment leaks in.
  std::map<std::string, std::string> env;
  std::string work_dir;  // must exist
  // Where stdout and stderr go: an fd the caller owns, or -1 for a pipe whose
  // read end Process::output_fd() returns.
  int output_fd = -1;
  // "KEY=VALUE" entries of `env` that mark every process of this job (e.g.
  // TIDE_JOB_ID=j-1, TIDE_ATTEMPT=2). Processes that left the job's session
  // and process group are still found by them. Empty: no such fallback.
  std::vector<std::string> tag;
  // With a cgroup manager, the job runs in a cgroup of its own named
  // `cgroup_key` ("" = none) with these limits.
  std::string cgroup_key;
  CgroupLimits limits;

  // What an isolating runtime lets the job reach (SandboxRuntime). The
  // process runtime ignores these: its jobs see the whole host.
  std::vector<std::string> writable;  // its directories and files: work, output, ...
  std::vector<std::string> readable;  // more it may read (where the notice appears)
  std::vector<std::string> devices;   // device nodes of its GPUs: "nvidia0", "nvidiactl"
  bool network = false;               // outbound network; else loopback only
  std::string hostname;               // inside the job's uts namespace
  std::string image = "host";         // the job's filesystem (OciRuntime: an image's rootfs)

  // How the process runtime starts the program: as this uid and gid (-1:
  // the agent's own), keeping these fds of the caller open across exec.
  int64_t uid = -1;
  int64_t gid = -1;
  std::vector<int> inherit_fds;
  // The program runs the job in a pid namespace of its own and exits once
  // the job's first process has (bwrap). When it exited by itself, nothing
  // of the job is left for the agent to reap but that namespace's pid 1,
  // which the caller reaps (SandboxRuntime, by the pid bwrap reports).
  bool own_pid_namespace = false;
};

struct ExitStatus {
  int exit_code = 0;  // when the process exited
  int signal = 0;     // non-zero when a signal killed it
  bool oom = false;   // it failed after the kernel killed a process of it for memory
  // What a shell would report: the exit code, or 128 + signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : exit_code; }
  std::string ToString() const;  // "exit code 3", "signal 9 (Killed)"
};

// A started job. Thread safety: calls on one Process must not overlap.
class Process {
 public:
  virtual ~Process() = default;  // kills what is left of the tree

  virtual int pid() const = 0;
  // Read end of the output pipe (owned by the Process, non-blocking), or -1
  // when the caller gave LaunchSpec::output_fd.
  virtual int output_fd() const = 0;
  // The uid the job's processes run as; -1: the agent's own.
  virtual int64_t uid() const { return -1; }
  // An fd that polls readable once the main process has exited (its pidfd),
  // so a caller can wait for the exit and for output in one poll(); -1 when
  // there is none (kernels before 5.3, or already reaped): call Poll().
  virtual int exit_fd() const { return -1; }
  // True once KillTree() has shown, through a cgroup the job cannot leave,
  // that nothing of it runs any more: a caller need not look for its
  // processes elsewhere (a uid sweep).
  virtual bool Contained() const { return false; }

  // The main process's exit, once it has exited; never blocks. Other
  // processes of the tree may still be running: KillTree() ends them.
  virtual std::optional<ExitStatus> Poll() = 0;
  // Waits up to `timeout_ms` (-1: forever) for Poll() to have a value.
  virtual std::optional<ExitStatus> Wait(int64_t timeout_ms) = 0;

  // Sends `sig` to every process of the job (its process group and any
  // descendant or tagged process outside it).
  virtual Status Signal(int sig) = 0;

  // SIGKILLs every process of the job until none remains, reaps the ones
  // that are the agent's children, and returns once the tree is gone.
  // Internal error if processes survive for ~10 s (e.g. stuck in the kernel).
  virtual Status KillTree() = 0;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // Starts the job. Errors (command not found, bad work dir, exec failure)
  // come back here, with a message for the user; nothing is left running.
  virtual Result<std::unique_ptr<Process>> Start(const LaunchSpec& spec) = 0;
};

}  // namespace tide::agent
