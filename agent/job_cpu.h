// JobCpu: where the agent's own CPU goes for its jobs, by phase.
//
// A CpuPhase scope charges the CPU time of the thread it runs on
// (CLOCK_THREAD_CPUTIME_ID: this thread only, never a job's processes) to
// one phase of an attempt, exclusively: while a nested scope runs, the
// outer one is not charged. Totals are process-wide; the agent logs them
// per attempt when it stops (`CpuPerAttempt`), which is how
// docs/benchmarks.md breaks a trivial job's cost down. Cheap enough to stay
// on: two clock reads per scope.
#pragma once

#include <cstdint>
#include <string>

namespace tide::agent {

enum class JobPhase : int {
  kOther,      // the attempt's threads outside any phase below
  kThreads,    // starting and joining an attempt's two threads
  kPrepare,    // directories, code, checkpoint restore
  kUid,        // claiming and releasing the job's uid
  kHandOver,   // handing the job's directories to its uid
  kCgroup,     // making, killing and removing the job's cgroup
  kSpawn,      // the clone and exec of the job's first process
  kWatch,      // pumping its output to the log, waiting for its exit
  kKill,       // making sure nothing of it is left
  kReport,     // "running" and "exited" to the server
  kLogs,       // shipping the log
  kOutputs,    // packing and uploading outputs
  kWipe,       // deleting the attempt's directory
  kCount
};

class CpuPhase {
 public:
  explicit CpuPhase(JobPhase phase);
  ~CpuPhase();
  CpuPhase(const CpuPhase&) = delete;
  CpuPhase& operator=(const CpuPhase&) = delete;

 private:
  JobPhase outer_;
};

// Charges what this thread spent since its last scope ended to kOther, and
// forgets the thread: an attempt's thread calls it as it ends.
void EndCpuThread();
// One more attempt ran (the divisor of CpuPerAttempt).
void CountAttempt();
// "over N attempts: prepare 0.40 ms, uid 0.02 ms, ..., total 3.1 ms", or ""
// before the first attempt.
std::string CpuPerAttempt();

}  // namespace tide::agent
