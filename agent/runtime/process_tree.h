// Process trees from /proc: which processes belong to a job.
//
// A job's processes are found four ways, because each alone can be escaped:
//   - its process group and session (the leader's pid; it called setsid),
//   - descendants, by walking ppid links (catches children that called
//     setsid or setpgid),
//   - "KEY=VALUE" tag entries in /proc/PID/environ (catches orphans that
//     both left the session and were reparented, to the agent as subreaper
//     or to init). Only processes below the agent or orphaned to init are
//     considered, so two agents on one machine never touch each other's
//     jobs even if their ids collide,
//   - and again descendants of everything found so far.
// The caller's own process and its ancestors are never part of a job.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tide::agent {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  char state = '?';         // 'R', 'S', 'D', 'Z', ...
  uint64_t start_time = 0;  // clock ticks after boot: (pid, start_time) names one process
};

// Every process visible in /proc. Processes that vanish while reading are
// skipped.
std::vector<ProcInfo> ListProcesses();

// Parses the contents of /proc/PID/stat. False if malformed.
bool ParseProcStat(const std::string& stat, ProcInfo* out);

// Reads /proc/PID/stat. False if the process is gone.
bool ReadProcInfo(pid_t pid, ProcInfo* out);

// True if /proc/PID/environ holds every entry of `tag` (false when empty or
// unreadable).
bool EnvironHasAll(pid_t pid, const std::vector<std::string>& tag);

// The processes of the job led by `leader` (including the leader, zombies
// included), taken from `procs`. `self` is the agent's pid.
std::vector<ProcInfo> FindJobProcesses(const std::vector<ProcInfo>& procs, pid_t leader,
                                       const std::vector<std::string>& tag, pid_t self);

// True if `ancestor` is on the ppid chain of `pid` (not counting pid itself).
bool IsDescendantOf(const std::vector<ProcInfo>& procs, pid_t pid, pid_t ancestor);

// The pids of this process's children (all threads), from
// /proc/self/task/*/children.
std::vector<pid_t> ListOwnChildren();

// What /proc/PID/status says of a process: whether any of its uids (real,
// effective, saved, filesystem) is `uid`, whether it is a zombie, and its
// parent. All false and 0 when it is gone.
struct UidProbe {
  bool runs_as = false;
  bool zombie = false;
  pid_t ppid = 0;
};
UidProbe ProbeUid(pid_t pid, uid_t uid);

// Reaps `pid` once it is a zombie, if it is this process's child running as
// `uid` (a uid no other job has, so a reused pid is never taken for it);
// waits for it to become one until `deadline_ms` (SystemClock's
// MonotonicMs()). False
// when it was still running at the deadline.
bool ReapChildOfUid(pid_t pid, uid_t uid, int64_t deadline_ms);
// The same for every child of this process that runs as `uid`.
void ReapChildrenOfUid(uid_t uid, int64_t deadline_ms);

}  // namespace tide::agent
