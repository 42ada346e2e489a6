// FakeRuntime: a Runtime with no processes, for agent tests of what the
// runner does around a job. The test scripts each job through its FakeJob:
// what it writes, when and how it exits, what a signal does to it, and
// reads back what the runner did (signals sent, tree kills).
//
// A FakeJob's output is a real pipe (Process::output_fd), so the runner's
// log pumping runs as it does for a real job. KillTree() ends a job that
// has not exited with SIGKILL and closes the pipe. Nothing is ever forked.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"

namespace tide::agent::testing {

// The test's handle on one started job; it outlives the job's Process.
class FakeJob {
 public:
  explicit FakeJob(LaunchSpec spec);
  ~FakeJob();

  const LaunchSpec& spec() const { return spec_; }

  // Appends `text` to the job's output (its stdout and stderr).
  void Write(std::string_view text);
  // The main process ends with `status`: {3, 0} exit code 3; {0, 9} killed
  // by SIGKILL; {0, 9, true} the kernel's OOM kill.
  void Exit(ExitStatus status);
  // From now on, signal `sig` makes the job exit with `status` (a handler
  // that exits); other signals are ignored, as a job that traps them.
  void ExitOnSignal(int sig, ExitStatus status);

  std::vector<int> signals();  // every Signal() the runner sent, in order
  int kill_trees();            // KillTree() calls
  bool exited();
  // Waits up to `timeout_ms` for `sig` to have been sent.
  bool WaitSignal(int sig, int timeout_ms = 10'000);

  // --- for FakeProcess
  std::optional<ExitStatus> Poll();
  std::optional<ExitStatus> Wait(int64_t timeout_ms);
  void Signal(int sig);
  void KillTree();
  int output_fd() const { return read_fd_; }

 private:
  void ExitLocked(ExitStatus status);  // REQUIRES: mu_ held

  const LaunchSpec spec_;
  int read_fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  int write_fd_ = -1;  // guarded by mu_; -1 once closed
  std::optional<ExitStatus> exit_;
  std::map<int, ExitStatus> on_signal_;
  std::vector<int> signals_;
  int kill_trees_ = 0;
};

class FakeRuntime final : public Runtime {
 public:
  // The next Start() fails with `st` (e.g. "command not found").
  void FailNextStart(Status st);

  // The `n`-th job started (0 first), once it has started; nullptr after
  // `timeout_ms`.
  std::shared_ptr<FakeJob> WaitStarted(size_t n, int timeout_ms = 10'000);
  size_t started();

  Result<std::unique_ptr<Process>> Start(const LaunchSpec& spec) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Status> fail_next_;
  std::vector<std::shared_ptr<FakeJob>> jobs_;
};

}  // namespace tide::agent::testing
