// JobReporter: the reporter thread of one attempt (job_runner.h). It tells
// the server, through ServerLink, what the control thread did:
//   "running" once the process runs; the log and the metric lines
//   (LogShipper, every ship_interval_ms or sooner when the control thread
//   asks, complete metric lines only); the checkpoint every checkpoint
//   interval when it changed; once the process is gone the rest of the
//   log, the final checkpoint (unless the job completed), the outputs and
//   "exited", each retried with backoff until acknowledged.
// A kNotFound or kConflict for the job means the server no longer wants
// it: the reporter marks the attempt rejected and orders a stop at once
// (grace 0). A kConflict on the log endpoint is a gap instead: the log
// stops there, the job goes on. 400/403/413 are logged and count as done.
//
// Thread safety: Run() is the body of one thread; it shares only
// AttemptState with the control thread.
#pragma once

#include <functional>
#include <string>

#include "agent/attempt.h"
#include "agent/job_env.h"
#include "api/types.h"

namespace tide::agent {

class JobReporter {
 public:
  // Every argument is borrowed and outlives the reporter.
  JobReporter(const api::Job& job, const JobPaths& paths, const RunnerDeps& deps,
              AttemptState* state);

  // Returns once "exited" is acknowledged, the job was rejected or the
  // attempt abandoned; then sets state->done.
  void Run();

 private:
  enum class Call { kOk, kRejected, kAbandoned };

  // Calls `fn` until it succeeds, backing off on transient errors. A 404 or
  // 409 marks the job rejected (and kills it); 400/403/413 are logged and
  // count as done; kAbandoned once the attempt was abandoned.
  Call Retry(const std::string& what, const std::function<Status()>& fn);
  void MarkRejected(const std::string& what, const Status& st);
  Call UploadOutputs();
  // Uploads checkpoint/ if it changed since the last upload (and held
  // still while it was packed). `final`: retried until acknowledged.
  Call UploadCheckpoint(bool final);

  const api::Job& job_;
  const JobPaths& paths_;
  const RunnerDeps& deps_;
  AttemptState* state_;
};

}  // namespace tide::agent
