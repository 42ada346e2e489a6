// Cgroups for jobs: a job's processes are kept in a cgroup the agent made,
// which caps its memory, CPU and number of processes, tells whether the
// kernel killed it for memory, and is how the whole job is killed, however
// its processes left their session or process group.
//
// Both layouts of Linux hosts are handled:
//   - cgroup v2 alone (systemd hosts): one directory per job, with
//     memory.max, cpu.max and pids.max; cgroup.kill ends it;
//   - hybrid (v1 controllers plus a v2 tree without controllers): the limits
//     go to the v1 memory, cpu and pids hierarchies, membership and
//     cgroup.kill (or the v1 freezer) to end it.
// The agent only ever writes below its own cgroup: it makes a subtree
// (`name`) under the cgroup it runs in, in each hierarchy, and a directory
// per job in that. On a pure v2 host with controllers to delegate, the agent
// moves itself into `name`/agent so that `name` may hand its controllers on.
//
// DetectCgroups reads /proc/self/cgroup and /proc/self/mountinfo; tests pass
// another `proc_self` and a `root` prefix to run on a fake tree.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::agent {

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0 = no limit
  double cpus = 0;           // CPU cores of time per second; 0 = no limit
  int64_t pids = 0;          // processes and threads; 0 = no limit
};

struct CpuThrottling {
  int64_t periods = 0;         // enforcement periods that have elapsed
  int64_t throttled = 0;       // periods in which the job was throttled
  int64_t throttled_usec = 0;  // time it spent throttled
};

// Where this process sits in each hierarchy.
struct CgroupLayout {
  std::string v2_mount;                        // where the unified tree is mounted
  std::string v2_dir;                          // in the unified tree ("" = none)
  std::set<std::string> v2_controllers;        // what v2_dir may hand to its children
  std::map<std::string, std::string> v1_dirs;  // controller -> this process's cgroup
  // The limit controllers (memory, cpu, pids) that v2 carries here: those
  // v2_dir may delegate, or none when the limits live in v1 (hybrid).
  std::vector<std::string> v2_limit_controllers() const;
  // True when limits are set through v2 (some of them may be missing).
  bool v2_limits() const;
  // "cgroup v2 at /sys/fs/cgroup/... with memory cpu pids", or the hybrid
  // layout, for the agent's log and `tide agent check`.
  std::string Describe() const;
};

Result<CgroupLayout> DetectCgroups(const std::string& proc_self = "/proc/self",
                                   const std::string& root = "");

class JobCgroup {
 public:
  ~JobCgroup();  // kills what is left and removes the directories

  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  // Moves `pid` (and so its future children) into the job's cgroups.
  Status Add(pid_t pid);
  // cgroup.procs of each of the job's cgroups, open for writing (O_CLOEXEC;
  // the caller closes them): a process that writes "0" to every one moves
  // itself in, as a new job process does before it execs.
  Result<std::vector<int>> OpenProcs() const;
  std::vector<pid_t> Pids() const;
  // Kills every process in the job's cgroup until none is left: with
  // cgroup.kill where the kernel has it, else freezes the cgroup (v1
  // freezer), kills every member and thaws it, so a fork cannot escape.
  Status Kill();
  // Whether the kernel's OOM killer killed a process of the job.
  bool OomKilled() const;
  Result<CpuThrottling> Throttling() const;
  // The directories made for the job, one per hierarchy used.
  std::vector<std::string> dirs() const;

 private:
  friend class CgroupManager;
  JobCgroup() = default;
  // v1: an eventfd the kernel signals when the job's memory cgroup runs out
  // (the kill itself is counted in the victim's cgroup, which may be a
  // sub-cgroup gone by the time the job is seen to end).
  void WatchOom(const std::string& dir);

  int oom_event_fd_ = -1;
  int oom_control_fd_ = -1;
  mutable bool oom_seen_ = false;
  std::string v2_;                          // "" if none
  bool v2_limits_ = false;
  std::map<std::string, std::string> v1_;   // controller -> dir
};

class CgroupManager {
 public:
  // Makes the subtree `name` under this process's cgroups.
  static Result<std::unique_ptr<CgroupManager>> Create(const CgroupLayout& layout,
                                                       const std::string& name);
  ~CgroupManager();  // removes the subtree's empty directories

  // A cgroup for one job (`key` names it: letters, digits, '-', '_', '.').
  Result<std::unique_ptr<JobCgroup>> CreateJob(const std::string& key, const CgroupLimits& limits);

  const CgroupLayout& layout() const { return layout_; }
  // Where the cgroup of job `key` lies in the v2 hierarchy, as container
  // runtimes name cgroups ("/tide-agent-7-0/j-1.1"); "" without a v2 tree.
  std::string V2Path(const std::string& key) const;

  // Removes the subtrees `prefix`<pid> and `prefix`<pid>-<n> that agents
  // no longer running left behind, e.g. after a kill -9: what still runs in
  // them is killed first (a job's children outlive their agent).
  static void RemoveStale(const CgroupLayout& layout, const std::string& prefix);

 private:
  CgroupManager() = default;

  CgroupLayout layout_;
  std::string v2_base_;                        // the subtree in the unified tree
  bool moved_ = false;                         // the agent moved into v2_base_/agent
  std::map<std::string, std::string> v1_base_; // controller -> subtree
};

}  // namespace tide::agent
