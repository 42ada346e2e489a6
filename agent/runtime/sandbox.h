// SandboxRuntime: the agent's default runtime. A job on a stranger's machine
// runs contained:
//   - as an unprivileged host uid of its own, claimed from a configured range
//     for the job's life (UidPool), with no capabilities;
//   - inside bubblewrap, in new user, pid, mount, ipc, uts and cgroup
//     namespaces, with --die-with-parent and --new-session;
//   - seeing the host's system directories read-only (/usr, /etc, /opt, …),
//     a private /tmp and /dev/shm, a minimal /dev, and only the GPU device
//     nodes of its own GPUs (plus nvidiactl, nvidia-uvm), read-write only
//     its own work, output and checkpoint directories;
//   - without network (a net namespace with only loopback) unless the job
//     asks for `network: true`, which shares the host's network;
//   - under a seccomp filter refusing what a training job never needs
//     (ptrace, mount, kernel modules, keyrings, bpf, namespaces, …);
//   - in the cgroup ProcessRuntime makes for it (limits, OOM, kill).
// The agent's data dir, its token and other jobs' directories are never
// bound into a sandbox. docs/security.md is the threat model.
//
// SandboxRuntime builds on ProcessRuntime: it claims a uid, hands the job's
// directories to it, and starts `bwrap ARGS -- COMMAND` as that uid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/runtime/process_runtime.h"
#include "agent/runtime/runtime.h"

namespace tide::agent {

// A first-last range of host uids for jobs ("2000000000-2000065535").
struct UidRange {
  uid_t first = 0;
  uid_t last = 0;
};
// Parses "FIRST-LAST"; the error names the flag. Refuses uid 0, ranges
// the wrong way round, and ranges holding a user of /etc/passwd or a group
// of /etc/group (a job's gid is its uid); `passwd`, `group`: their paths.
Result<UidRange> ParseUidRange(const std::string& text, const std::string& passwd = "/etc/passwd",
                               const std::string& group = "/etc/group");

// A uid a job holds for its life. The claim is an flock on
// `lock_dir`/<uid>.lock: agents sharing a host (and a range) never hand one
// uid to two jobs, and a dead agent's claims end with it. The lock file
// says whether the last holder saw the uid empty when it let go ("free"):
// only a uid left otherwise (its holder died, or could not kill what ran as
// it) is swept at its next claim.
class UidLease {
 public:
  // `released` is told the uid once it is marked free (its pool).
  UidLease(uid_t uid, int lock_fd, std::function<void(uid_t)> released = nullptr)
      : uid_(uid), fd_(lock_fd), released_(std::move(released)) {}
  // Sweeps the uid unless MarkEmpty() was called, marks the lock file free
  // once nothing runs as it, and drops the claim.
  ~UidLease();
  UidLease(const UidLease&) = delete;
  UidLease& operator=(const UidLease&) = delete;
  uid_t uid() const { return uid_; }
  // Nothing runs as the uid any more, and nothing will until the next claim:
  // the release need not sweep it.
  void MarkEmpty() { empty_ = true; }

 private:
  uid_t uid_;
  int fd_;
  bool empty_ = false;
  std::function<void(uid_t)> released_;
};

class UidPool {
 public:
  UidPool(UidRange range, std::string lock_dir);
  // Claims a free uid and kills any process still running as it (left by an
  // agent that died). Unavailable when every uid of the range is held. Uids
  // this pool let go of marked free come first (newest first): their lock
  // files say that nothing runs as them, so they need no sweep. Any thread.
  Result<std::unique_ptr<UidLease>> Claim();

 private:
  struct Shared {
    std::mutex mu;
    uid_t next;                   // where the search for an unclaimed uid goes on
    std::vector<uid_t> released;  // let go of by this pool, marked free
  };
  Result<std::unique_ptr<UidLease>> TryClaim(uid_t uid, bool* held);

  UidRange range_;
  std::string lock_dir_;
  std::shared_ptr<Shared> shared_;  // its leases hold it too: they may outlive the pool
};

// SIGKILLs every process running as `uid` until none is left (~5 s), and
// reaps those that end as zombies of this process (a sandbox's inner
// processes are reparented to the agent, a subreaper, when their parent
// goes first). Zombies of other parents are theirs to reap.
Status KillUid(uid_t uid);
// Sends `sig` to every process running as `uid` but `monitor` and its
// children: the job's own processes, not the sandbox's or container's pid 1,
// which would die of a SIGTERM (or ignore it) without passing it on.
Status SignalUid(uid_t uid, pid_t monitor, int sig);
// Hands `path` and everything below it to `uid` (and its gid), never
// following a link, and makes `path` itself private to that uid (0700, a
// file 0600): no other job's uid reads through it.
Status GiveTree(const std::string& path, uid_t uid);
// bwrap and tide-init exit 128+S when the job was killed by signal S, as a
// shell does: reported as signal S.
std::optional<ExitStatus> FromShellCode(std::optional<ExitStatus> e);

// A job that runs as a uid of its own under a monitor (SandboxRuntime's
// bwrap, OciRuntime's runc): the process tree `inner` leads and the uid it
// holds. Signals go to the job's processes, not to the monitor or the
// sandbox's or container's pid 1, which would die of a SIGTERM (or ignore
// it) without passing it on and take the job with them before it could act
// on the notice. A tree kill also sweeps the uid. Exit codes 128+S read as
// signal S (FromShellCode). `after_kill`, if set, runs after every tree
// kill and owns what it releases (a container's state and overlay).
// `what` names the job in warnings ("sandboxed job").
class UidJobProcess final : public Process {
 public:
  // `info_fd` (owned): the read end of bwrap's --info-fd, which names the
  // pid 1 of the job's pid namespace; -1 for none.
  UidJobProcess(std::unique_ptr<Process> inner, std::unique_ptr<UidLease> uid, std::string what,
                std::function<void()> after_kill = nullptr, int info_fd = -1);
  ~UidJobProcess() override;  // kills the tree, then releases the uid

  int pid() const override { return inner_->pid(); }
  int output_fd() const override { return inner_->output_fd(); }
  int exit_fd() const override { return inner_->exit_fd(); }
  bool Contained() const override { return inner_->Contained(); }
  int64_t uid() const override { return uid_->uid(); }
  std::optional<ExitStatus> Poll() override;
  std::optional<ExitStatus> Wait(int64_t timeout_ms) override;
  Status Signal(int sig) override;
  Status KillTree() override;

 private:
  std::unique_ptr<Process> inner_;
  std::unique_ptr<UidLease> uid_;
  // bwrap's pid 1, which bwrap's outer process does not wait for: when
  // that exits first, the pid 1 is handed to the agent to reap.
  pid_t NamespaceInit();
  void ReapNamespaceInit();

  std::string what_;
  std::function<void()> after_kill_;
  int info_fd_;
  pid_t ns_init_ = 0;  // 0: not read yet; -1: unknown
};

// Everything bubblewrap needs for one job.
struct SandboxPlan {
  uid_t uid = 0;
  std::string work_dir;
  std::vector<std::string> writable;  // bound read-write at the same path
  std::vector<std::string> readable;  // bound read-only at the same path
  // Host device node -> path inside ("/dev/nvidia0").
  std::vector<std::pair<std::string, std::string>> devices;
  std::vector<std::string> hidden;    // covered by an empty tmpfs (the data dir)
  bool network = false;
  std::string hostname;
  int seccomp_fd = -1;  // -1 = no filter
  int info_fd = -1;     // bwrap writes its pid 1's pid here; -1 = none
  std::vector<std::string> command;
};
// The bwrap arguments for `plan`, ending with "--" and the command.
// `system_root` prefixes the host paths probed for the read-only view
// (tests); what is bound keeps its real path.
std::vector<std::string> BwrapArgs(const SandboxPlan& plan, const std::string& system_root = "");

// The job seccomp filter as a BPF program (what bwrap --seccomp reads):
// refused with EPERM are ptrace and process_vm_*, mount and friends, kernel
// modules, kexec, keyrings, bpf, perf_event_open, userfaultfd, namespaces
// (unshare, setns, clone with namespace flags), reboot, swap, clock setting,
// open_by_handle_at, and acct; clone3 answers ENOSYS so that libc falls
// back to clone, whose flags the filter can see. Calls of other
// architectures are refused.
Result<std::string> JobSeccompFilter();
// The rules of that filter, for runtimes that take them as data (OCI).
extern const std::vector<const char*> kJobRefusedSyscalls;   // EPERM
extern const std::vector<uint64_t> kJobRefusedCloneFlags;    // clone with any: EPERM

struct SandboxOptions {
  std::string bwrap;  // path of bwrap; "" = looked up in PATH
  UidRange uids;
  std::string lock_dir = "/run/tide/job-uids";
  std::string gpu_dev_root = "/dev";  // where /dev/nvidia* are found
  std::vector<std::string> hidden;    // never visible: the agent's data dir
};

class SandboxRuntime final : public Runtime {
 public:
  // Checks that bwrap runs and that this process may switch uids (root).
  static Result<std::unique_ptr<SandboxRuntime>> Create(SandboxOptions options,
                                                        ProcessRuntime* processes);

  // The job's LaunchSpec::writable paths are handed to its uid (and their
  // parents made traversable); its command is resolved like a shell would
  // before anything starts, so a missing program is a start failure.
  Result<std::unique_ptr<Process>> Start(const LaunchSpec& spec) override;

  const SandboxOptions& options() const { return options_; }

 private:
  SandboxRuntime(SandboxOptions options, ProcessRuntime* processes);

  SandboxOptions options_;
  ProcessRuntime* processes_;  // not owned
  UidPool uids_;
  std::string filter_;  // the BPF program
};

}  // namespace tide::agent
