#include "agent/job_reporter.h"

#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/job_cpu.h"
#include "agent/log_shipper.h"
#include "common/archive.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/token.h"

namespace tide::agent {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxLogPost = 1 << 20;  // one POST of log bytes

// While alive, this thread opens files with the rights of `uid` (-1: no
// change), so a link a job planted in its own directories cannot make the
// agent read what the job itself may not.
class FsUidScope {
 public:
  explicit FsUidScope(int64_t uid) : uid_(uid) {
    if (uid_ < 0) return;
    ::setfsgid(static_cast<gid_t>(uid_));
    ::setfsuid(static_cast<uid_t>(uid_));
  }
  ~FsUidScope() {
    if (uid_ < 0) return;
    ::setfsuid(::geteuid());
    ::setfsgid(::getegid());
  }
  FsUidScope(const FsUidScope&) = delete;
  FsUidScope& operator=(const FsUidScope&) = delete;

 private:
  int64_t uid_;
};

// The end of the last complete line of `fd` at or after `from` (so a
// metric line the job is still writing is never shipped half).
int64_t CompleteLinesEnd(int fd, int64_t from) {
  struct stat sb {};
  if (fd < 0 || ::fstat(fd, &sb) != 0 || sb.st_size <= from) return from;
  int64_t end = std::min<int64_t>(sb.st_size, from + static_cast<int64_t>(kMaxLogPost));
  std::string buf(static_cast<size_t>(end - from), '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), from);
  if (n <= 0) return from;
  size_t nl = std::string_view(buf.data(), static_cast<size_t>(n)).rfind('\n');
  return nl == std::string::npos ? from : from + static_cast<int64_t>(nl) + 1;
}

// Deletes everything of the attempt on this node (its root and all under
// it: what the job wrote, its code, log and metric lines), and the job's
// directory if no other attempt is left in it.
void WipeAttempt(const JobPaths& paths) {
  std::error_code ec;
  fs::remove_all(paths.root, ec);
  if (ec) spdlog::warn("remove {}: {}", paths.root, ec.message());
  fs::remove(fs::path(paths.root).parent_path(), ec);
}

// The secrets' values the job's log and metric lines are masked with; the
// shortest are given to the job but not masked (api/types.h).
std::vector<std::string> MaskedSecrets(const api::JobSpec& spec) {
  std::vector<std::string> out;
  for (const auto& [name, value] : spec.secrets) {
    if (value.size() >= api::kMinMaskedSecret) out.push_back(value);
  }
  return out;
}

}  // namespace

JobReporter::JobReporter(const api::Job& job, const JobPaths& paths, const RunnerDeps& deps,
                         AttemptState* state)
    : job_(job), paths_(paths), deps_(deps), state_(state) {}


void JobReporter::MarkRejected(const std::string& what, const Status& st) {
  spdlog::warn("job {} attempt {}: the server no longer wants it ({}: {}): killing it", job_.id,
               job_.attempt, what, st.ToString());
  state_->rejected = true;
  state_->wipe = true;
  state_->Stop("rejected", 0);
}

JobReporter::Call JobReporter::Retry(const std::string& what, const std::function<Status()>& fn) {
  int64_t backoff = deps_.min_backoff_ms;
  for (int failures = 0;; ++failures) {
    if (state_->abandoned) return Call::kAbandoned;
    if (state_->rejected) return Call::kRejected;
    Status st = fn();
    if (st.ok()) return Call::kOk;
    if (IsRejection(st)) {
      MarkRejected(what, st);
      return Call::kRejected;
    }
    if (IsPermanent(st)) {
      spdlog::error("job {} attempt {}: {}: {} (not retried)", job_.id, job_.attempt, what,
                    st.ToString());
      return Call::kOk;
    }
    if (failures == 0 || failures % 20 == 0) {
      spdlog::warn("job {} attempt {}: {}: {} (retrying)", job_.id, job_.attempt, what,
                   st.ToString());
    }
    state_->SleepUnlessAbandoned(backoff);
    backoff = std::min(backoff * 2, deps_.max_backoff_ms);
  }
}

void JobReporter::Run() {
  auto finish = [this] {
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [this] { return state_->outcome_ready; });
    }
    // The job has exited; what it left goes before the attempt is done,
    // outside the lock (a stop order may want it meanwhile).
    if (state_->wipe) {
      CpuPhase cpu(JobPhase::kWipe);
      WipeAttempt(paths_);
    }
    state_->done = true;
  };

  bool started;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [this] { return state_->started || state_->outcome_ready; });
    started = state_->started;
  }
  if (started) {
    api::JobEvent running;
    running.attempt = job_.attempt;
    running.state = "running";
    CpuPhase cpu(JobPhase::kReport);
    if (Retry("report running", [&] { return deps_.server->PostEvent(job_.id, running); }) != Call::kOk) {
      return finish();
    }
  }

  // A 409 on the log endpoint is a gap (the server lost bytes it had
  // acknowledged), not a rejection of the job: the log stops there, the job
  // goes on, and the whole log stays in the local file.
  bool log_broken = false;
  LogShipper shipper(
      state_->log_fd,
      [&](int64_t offset, std::string_view data) {
        if (log_broken) return Status::Ok();
        Status st = deps_.server->PostLogs(job_.id, job_.attempt, offset, data);
        if (st.code() == Code::kConflict) {
          spdlog::error(
              "job {} attempt {}: the server refused log bytes at offset {} ({}); "
              "no more log is shipped",
              job_.id, job_.attempt, offset, st.message());
          log_broken = true;
          return Status::Ok();
        }
        return st;
      },
      kMaxLogPost);
  shipper.set_masks(MaskedSecrets(job_.spec));
  // Metric lines go the same way as the log, complete lines only; a line
  // the server refuses ends the metrics, not the job.
  // Never blocking, never through a link: the job owns the directory and
  // could put a FIFO or a link where the file was.
  int metrics_fd = ::open(paths_.metrics.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (metrics_fd >= 0) {
    struct stat sb {};
    if (::fstat(metrics_fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      ::close(metrics_fd);
      metrics_fd = -1;
    }
  }
  bool metrics_broken = false;
  LogShipper metrics(
      metrics_fd,
      [&](int64_t offset, std::string_view data) {
        if (metrics_broken) return Status::Ok();
        Status st = deps_.server->PostMetrics(job_.id, job_.attempt, offset, data);
        if (st.code() == Code::kConflict || IsPermanent(st)) {
          spdlog::error("job {} attempt {}: the server refused metric lines at offset {} ({})",
                        job_.id, job_.attempt, offset, st.message());
          metrics_broken = true;
          return Status::Ok();
        }
        return st;
      },
      kMaxLogPost);
  metrics.set_masks(MaskedSecrets(job_.spec));
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } close_metrics{metrics_fd};
  const int64_t checkpoint_every = job_.spec.checkpoint_interval_s > 0
                                       ? job_.spec.checkpoint_interval_s * 1000
                                       : deps_.checkpoint_interval_ms;
  int64_t next_checkpoint = deps_.clock->MonotonicMs() + checkpoint_every;

  // While the job runs: ship every interval (or sooner when much is
  // pending); on failure back off, and never block the job.
  int64_t backoff = deps_.min_backoff_ms;
  int64_t next_try = 0;
  for (;;) {
    bool ended;
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait_for(lock, std::chrono::milliseconds(deps_.ship_interval_ms),
                   [this] { return state_->ship_now || state_->outcome_ready || state_->abandoned.load(); });
      state_->ship_now = false;
      ended = state_->outcome_ready;
    }
    if (state_->abandoned || state_->rejected) return finish();
    if (ended) break;
    if (deps_.clock->MonotonicMs() < next_try) continue;
    if (deps_.clock->MonotonicMs() >= next_checkpoint) {
      Call c = UploadCheckpoint(/*final=*/false);
      if (c == Call::kRejected || c == Call::kAbandoned) return finish();
      next_checkpoint = deps_.clock->MonotonicMs() + checkpoint_every;
    }
    int64_t metrics_end = CompleteLinesEnd(metrics_fd, metrics.sent());
    if (metrics_end > metrics.sent()) {
      Status st = metrics.Ship(metrics_end, /*complete=*/true);  // whole lines
      if (IsRejection(st)) {
        MarkRejected("ship metrics", st);
        return finish();
      }
    }
    if (!shipper.HasToSend(state_->log_written)) continue;
    CpuPhase cpu(JobPhase::kLogs);
    Status st = shipper.Ship(state_->log_written);
    if (st.ok()) {
      backoff = deps_.min_backoff_ms;
      next_try = 0;
    } else if (IsRejection(st)) {
      MarkRejected("ship log", st);
      return finish();
    } else {
      if (backoff == deps_.min_backoff_ms) {
        spdlog::warn("job {}: ship log: {} (retrying)", job_.id, st.ToString());
      }
      next_try = deps_.clock->MonotonicMs() + backoff;
      backoff = std::min(backoff * 2, deps_.max_backoff_ms);
    }
  }

  api::JobEvent outcome;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    outcome = state_->outcome;
  }
  // The exit's message can quote the job's environment ("command not
  // found (PATH=…)"): masked like the log.
  for (const std::string& value : MaskedSecrets(job_.spec)) {
    for (size_t at = outcome.message.find(value); at != std::string::npos;
         at = outcome.message.find(value, at + value.size())) {
      outcome.message.replace(at, value.size(), std::string(value.size(), '*'));
    }
  }
  std::optional<CpuPhase> cpu(JobPhase::kLogs);
  Call c = Retry("ship log", [&] { return shipper.Ship(state_->log_written, /*complete=*/true); });
  if (c == Call::kOk) {
    c = Retry("ship metrics", [&] {
      int64_t end;
      while ((end = CompleteLinesEnd(metrics_fd, metrics.sent())) > metrics.sent()) {
        TIDE_RETURN_IF_ERROR(metrics.Ship(end, /*complete=*/true));
      }
      return Status::Ok();
    });
  }
  // A job that completed needs no checkpoint; any other end may be
  // followed by another attempt that resumes from it.
  bool completed = outcome.reason.empty() && outcome.exit_code && *outcome.exit_code == 0;
  if (c == Call::kOk && !completed) c = UploadCheckpoint(/*final=*/true);
  cpu.emplace(JobPhase::kOutputs);
  if (c == Call::kOk) c = UploadOutputs();
  cpu.emplace(JobPhase::kReport);
  if (c == Call::kOk) {
    // If an earlier try reached the server but its answer was lost, the
    // server has released the attempt and answers 409: that is our ack.
    int tries = 0;
    c = Retry("report exit", [&] {
      Status st = deps_.server->PostEvent(job_.id, outcome);
      if (st.code() == Code::kConflict && ++tries > 1) return Status::Ok();
      if (st.code() != Code::kConflict) ++tries;
      return st;
    });
    if (c == Call::kOk) {
      spdlog::info("job {} attempt {}: reported exit (exit_code {}, reason \"{}\")", job_.id,
                   job_.attempt, outcome.exit_code.value_or(-1), outcome.reason);
      // The server has the log, the outputs and the checkpoint now.
      state_->wipe = true;
    }
  }
  cpu.reset();
  finish();
}

JobReporter::Call JobReporter::UploadCheckpoint(bool final) {
  std::string before;
  Result<std::string> archive = std::string();
  {
    FsUidScope as_job(state_->job_uid);
    before = CheckpointFingerprint(paths_.checkpoint);
    if (before.empty() || before == state_->checkpoint_sent) return Call::kOk;
    PackOptions options;
    options.skip_other_files = true;
    options.max_bytes = static_cast<int64_t>(api::kMaxUploadBody);
    archive = PackDirectory(paths_.checkpoint, options);
    if (!archive.ok()) {
      spdlog::warn("job {} attempt {}: checkpoint not uploaded: {}", job_.id, job_.attempt,
                   archive.status().ToString());
      return Call::kOk;
    }
    // Written to while it was packed: the archive may hold half a file.
    // While the job runs, try again next time; at the end nothing writes.
    if (!final && CheckpointFingerprint(paths_.checkpoint) != before) return Call::kOk;
  }
  const std::string digest = Sha256Hex(*archive);
  Call c;
  if (final) {
    c = Retry("upload checkpoint",
              [&] { return deps_.server->PutCheckpoint(job_.id, job_.attempt, *archive, digest); });
  } else {
    Status st = deps_.server->PutCheckpoint(job_.id, job_.attempt, *archive, digest);
    if (IsRejection(st)) {
      MarkRejected("upload checkpoint", st);
      return Call::kRejected;
    }
    if (!st.ok()) {
      spdlog::warn("job {} attempt {}: upload checkpoint: {} (next interval)", job_.id,
                   job_.attempt, st.ToString());
      return Call::kOk;
    }
    c = Call::kOk;
  }
  if (c == Call::kOk) {
    state_->checkpoint_sent = before;
    spdlog::info("job {} attempt {}: checkpoint uploaded ({} bytes)", job_.id, job_.attempt,
                 archive->size());
  }
  return c;
}

JobReporter::Call JobReporter::UploadOutputs() {
  std::error_code ec;
  if (!fs::is_directory(paths_.output, ec)) return Call::kOk;
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(
           paths_.output, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(st)) files.push_back(it->path().string());
  }
  for (const std::string& path : files) {
    std::string rel = fs::path(path).lexically_relative(paths_.output).generic_string();
    Result<std::string> clean = CleanRelativePath(rel);
    if (!clean.ok()) {
      spdlog::warn("job {}: output {} skipped: {}", job_.id, rel, clean.status().message());
      continue;
    }
    // The job is dead, but still: never follow a link out of output/.
    int fd;
    {
      FsUidScope as_job(state_->job_uid);
      fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) continue;
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      ::close(fd);
      continue;
    }
    if (static_cast<size_t>(sb.st_size) > api::kMaxUploadBody) {
      ::close(fd);
      spdlog::warn("job {}: output {} skipped: {} bytes is over the {} MiB limit", job_.id, *clean,
                   sb.st_size, api::kMaxUploadBody >> 20);
      continue;
    }
    std::string data(static_cast<size_t>(sb.st_size), '\0');
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::read(fd, data.data() + got, data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(fd);
    data.resize(got);
    Call c = Retry("upload output " + *clean,
                   [&] { return deps_.server->PutOutput(job_.id, job_.attempt, *clean, data); });
    if (c != Call::kOk) return c;
  }
  return Call::kOk;
}

}  // namespace tide::agent
