// ProcessRuntime: a job is a plain process tree started with fork/exec.
//
// Each job gets its own session and process group (setsid), a clean
// environment, stdin from /dev/null, stdout and stderr into one pipe (or the
// caller's fd), and PR_SET_PDEATHSIG=SIGKILL so it dies with the thread that
// started it. Constructing a ProcessRuntime makes this process a child
// subreaper (PR_SET_CHILD_SUBREAPER), so orphans of a job are reparented to
// the agent instead of init, where KillTree() and ReapOrphans() find them.
//
// What the runtime reaps: the main process of each job (once its tree is
// dead, so its pid can never be reused while it still names the job's
// process group), the job processes KillTree() killed, and zombies of
// orphans reparented to us that belong to a live job. It never reaps other
// children of the process.
//
// Thread safety: Start() and ReapOrphans() may be called from any thread;
// each Process is used by one thread at a time. Start() must be called from a
// thread that outlives the job (PR_SET_PDEATHSIG fires when the *thread*
// that forked exits).
#pragma once

#include <memory>

#include "agent/runtime/runtime.h"

namespace tide::agent {

class ProcessRuntime final : public Runtime {
 public:
  ProcessRuntime();
  ~ProcessRuntime() override;

  Result<std::unique_ptr<Process>> Start(const LaunchSpec& spec) override;

  // Jobs with a LaunchSpec::cgroup_key run in a cgroup of `cgroups` (not
  // owned; outlives the runtime): their limits hold, their OOM kills are
  // told apart, and KillTree() empties the cgroup first.
  void set_cgroups(CgroupManager* cgroups) { cgroups_ = cgroups; }

  // Reaps zombies of job orphans reparented to this process. Process::Poll()
  // calls it about once a second; callers may too.
  void ReapOrphans();

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  CgroupManager* cgroups_ = nullptr;
};

// Finds the program `name` the way a shell would, but with the job's PATH and
// relative to its work dir. The error is for the user.
Result<std::string> ResolveProgram(const std::string& name, const std::string& path_var,
                                   const std::string& work_dir);

// ResolveProgram for an isolated job: a path is looked up on the host, as
// root, where the job may not look; whatever failed, the error says only
// that, so it tells nothing of the host's files.
Result<std::string> ResolveJobProgram(const std::string& name, const std::string& path_var,
                                      const std::string& work_dir);

// The oom_score_adj a job gets: the agent's own, but never below 0, so an
// agent shielded from the OOM killer (a service's OOMScoreAdjust=-500) does
// not shield its jobs too.
int JobOomScoreAdj();

// PATH used when the job's environment has none.
inline constexpr const char* kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

}  // namespace tide::agent
