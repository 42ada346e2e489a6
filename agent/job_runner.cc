#include "agent/job_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "agent/job_cpu.h"
#include "agent/srun.h"
#include "common/archive.h"
#include "common/log.h"
#include "common/paths.h"

namespace tide::agent {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kShipThresholdBytes = 256 << 10;  // wake the reporter early
constexpr int64_t kCodeFetchPatienceMs = 60'000;    // server restarts while fetching code
constexpr int64_t kDrainTimeoutMs = 2'000;          // reading the pipe after the tree died

Status WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::Internal(std::string("write job log: ") + std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

bool IsSafeJobId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

JobRunner::JobRunner(api::Job job, RunnerDeps deps, api::Gang gang)
    : job_(std::move(job)), gang_(std::move(gang)), deps_(std::move(deps)) {
  paths_ = PathsFor(deps_.data_dir, IsSafeJobId(job_.id) ? job_.id : "_invalid", job_.attempt);
}

JobRunner::~JobRunner() {
  if (!state_.done.load()) Abandon();
  CpuPhase cpu(JobPhase::kThreads);
  if (control_thread_.joinable()) control_thread_.join();
  if (reporter_thread_.joinable()) reporter_thread_.join();
  if (state_.log_fd >= 0) ::close(state_.log_fd);
}

void JobRunner::Start() {
  CpuPhase cpu(JobPhase::kThreads);
  CountAttempt();
  control_thread_ = std::thread([this] {
    {
      CpuPhase attempt(JobPhase::kOther);
      ControlMain();
    }
    EndCpuThread();
  });
  reporter_thread_ = std::thread([this] {
    {
      CpuPhase attempt(JobPhase::kOther);
      reporter_.Run();
    }
    EndCpuThread();
  });
}

void JobRunner::Stop(const std::string& reason, int64_t grace_s) { state_.Stop(reason, grace_s); }

void JobRunner::Abandon() {
  state_.abandoned = true;
  state_.Stop("abandoned", 0);
}

// ------------------------------------------------------------------ control

void JobRunner::ControlMain() {
  api::JobEvent outcome;
  outcome.attempt = job_.attempt;
  outcome.state = "exited";

  LaunchSpec spec;
  Status prepared = [&] {
    CpuPhase cpu(JobPhase::kPrepare);
    return Prepare(&spec);
  }();
  std::unique_ptr<Process> process;
  bool stopped_early = false;
  if (prepared.ok()) {
    std::lock_guard<std::mutex> lock(state_.mu);
    stopped_early = state_.stop_ordered;
    if (stopped_early) {
      outcome.reason = state_.stop_reason;
      outcome.message = "stopped before the job started";
    }
  }
  // The job's max_runtime counts from its launch.
  int64_t launched = 0;
  if (prepared.ok() && !stopped_early) {
    launched = deps_.clock->MonotonicMs();
    Result<std::unique_ptr<Process>> started = deps_.runtime->Start(spec);
    if (started.ok()) {
      process = std::move(*started);
    } else {
      prepared = started.status();
    }
  }
  if (!prepared.ok() && !stopped_early) {
    std::lock_guard<std::mutex> lock(state_.mu);
    if (state_.stop_ordered) {  // e.g. cancelled while the code was being fetched
      stopped_early = true;
      outcome.reason = state_.stop_reason;
      outcome.message = "stopped before the job started";
    }
  }
  if (!prepared.ok() && !stopped_early) {
    outcome.reason = "start_failed";
    outcome.message = prepared.message();
    spdlog::warn("job {} attempt {}: start failed: {}", job_.id, job_.attempt, prepared.message());
    LogLine("start failed: " + prepared.message());
  }
  if (process) {
    spdlog::info("job {} attempt {}: started pid {} on gpus [{}]", job_.id, job_.attempt,
                 process->pid(), spec.env["CUDA_VISIBLE_DEVICES"]);
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.started = true;
      state_.job_uid = process->uid();
    }
    state_.cv.notify_all();
    RunProcess(process.get(), launched);
    CpuPhase cpu(JobPhase::kKill);
    process.reset();
    std::lock_guard<std::mutex> lock(state_.mu);
    outcome = state_.outcome;
  }
  state_.process_finished = true;
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    state_.outcome = outcome;
    state_.outcome_ready = true;
  }
  state_.cv.notify_all();
}

Status JobRunner::Prepare(LaunchSpec* spec) {
  if (!IsSafeJobId(job_.id)) return Status::InvalidArgument("unsafe job id \"" + job_.id + "\"");
  if (job_.attempt < 1) return Status::InvalidArgument("bad attempt number");
  for (int index : job_.gpus) {
    bool found = false;
    for (const api::Gpu& g : deps_.node_gpus) found = found || g.index == index;
    if (!found) {
      return Status::InvalidArgument("GPU index " + std::to_string(index) +
                                     " does not exist on this node");
    }
  }
  if (job_.spec.command.empty()) return Status::InvalidArgument("the job has no command");
  const std::string image = job_.spec.image.empty() ? "host" : job_.spec.image;
  if (std::find(deps_.images.begin(), deps_.images.end(), image) == deps_.images.end()) {
    std::string offered;
    for (const std::string& i : deps_.images) offered += (offered.empty() ? "" : ", ") + i;
    return Status::InvalidArgument("image \"" + image + "\" is not offered by this agent (it offers " +
                                   offered + ")", "image");
  }

  // A re-delivered attempt (e.g. after an agent restart) starts clean; the
  // checkpoint comes from the server (RestoreCheckpoint).
  std::error_code ec;
  fs::remove_all(paths_.work, ec);
  fs::remove_all(paths_.output, ec);
  fs::remove(paths_.notice, ec);
  for (const std::string& dir : {paths_.work, paths_.output, paths_.checkpoint, paths_.control}) {
    fs::create_directories(dir, ec);
    if (ec) return Status::Internal("create " + dir + ": " + ec.message());
  }
  state_.log_fd = ::open(paths_.log.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (state_.log_fd < 0) return Status::Internal("open " + paths_.log + ": " + std::strerror(errno));
  {
    int fd = ::open(paths_.metrics.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                    0644);
    if (fd < 0) return Status::Internal("create " + paths_.metrics + ": " + std::strerror(errno));
    ::close(fd);
  }

  // Without its checkpoint a resumed job would silently start over: not
  // restoring it is a start failure.
  TIDE_RETURN_IF_ERROR(RestoreCheckpoint());

  if (!job_.spec.code.empty()) {
    Result<std::string> archive = FetchPatiently([&] { return deps_.server->GetCode(job_.id); });
    if (!archive.ok()) return archive.status().WithContext("fetch code archive " + job_.spec.code);
    Status st = UnpackArchive(*archive, paths_.work);
    if (!st.ok()) return st.WithContext("unpack code archive");
  }

  if (job_.spec.slurm) {
    // srun for the batch script, where the job can run but not change it.
    fs::create_directories(paths_.bin, ec);
    if (ec) return Status::Internal("create " + paths_.bin + ": " + ec.message());
    fs::permissions(paths_.bin, fs::perms(0755), ec);
    TIDE_RETURN_IF_ERROR(WriteFileAtomic(paths_.bin + "/srun", SrunScript(), 0755));
  }

  spec->argv = job_.spec.command;
  spec->env = BuildJobEnv(job_, gang_, paths_, deps_.node_gpus, deps_.node_name);
  spec->work_dir = paths_.work;
  spec->output_fd = -1;
  spec->tag = {"TIDE_JOB_ID=" + job_.id, "TIDE_ATTEMPT=" + std::to_string(job_.attempt)};
  spec->cgroup_key = job_.id + "." + std::to_string(job_.attempt);
  spec->limits.memory_bytes = job_.spec.resources.memory_mb << 20;
  spec->limits.cpus = job_.spec.resources.cpus;
  spec->limits.pids = deps_.pids_limit;
  spec->writable = {paths_.work, paths_.output, paths_.checkpoint, paths_.metrics};
  spec->readable = {paths_.control};
  for (int index : job_.gpus) {
    for (const api::Gpu& g : deps_.node_gpus) {
      if (g.index == index) spec->devices.push_back("nvidia" + std::to_string(g.minor >= 0 ? g.minor : g.index));
    }
  }
  if (!job_.gpus.empty()) spec->devices.insert(spec->devices.end(), {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"});
  spec->network = job_.spec.network;
  spec->image = image;
  spec->hostname = deps_.node_name.empty() ? "tide-job" : deps_.node_name;
  return Status::Ok();
}

Result<std::string> JobRunner::FetchPatiently(const std::function<Result<std::string>()>& fetch) {
  int64_t give_up = deps_.clock->MonotonicMs() + kCodeFetchPatienceMs;
  int64_t backoff = deps_.min_backoff_ms;
  for (;;) {
    Result<std::string> got = fetch();
    if (got.ok()) return got;
    bool stop;
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      stop = state_.stop_ordered;
    }
    if (IsRejection(got.status()) || IsPermanent(got.status()) || stop || state_.abandoned ||
        deps_.clock->MonotonicMs() >= give_up) {
      return got.status();
    }
    state_.SleepUnlessAbandoned(backoff);
    backoff = std::min(backoff * 2, deps_.max_backoff_ms);
  }
}

// Whatever an earlier attempt left here locally is not trusted: the job
// resumes from what the server acknowledged, on whichever node it runs.
Status JobRunner::RestoreCheckpoint() {
  std::error_code ec;
  fs::remove_all(paths_.checkpoint, ec);
  fs::create_directories(paths_.checkpoint, ec);
  if (ec) return Status::Internal("create " + paths_.checkpoint + ": " + ec.message());
  if (job_.checkpoint_attempt <= 0) return Status::Ok();
  Result<std::string> archive =
      FetchPatiently([&] { return deps_.server->GetCheckpoint(job_.id, job_.attempt); });
  if (!archive.ok() && archive.status().code() == Code::kNotFound &&
      archive.status().message().find("no checkpoint") != std::string::npos) {
    return Status::Ok();  // another rank of a gang saved one, this one none
  }
  if (!archive.ok()) return archive.status().WithContext("fetch the checkpoint");
  Status st = UnpackArchive(*archive, paths_.checkpoint);
  if (!st.ok()) return st.WithContext("unpack the checkpoint");
  state_.checkpoint_sent = CheckpointFingerprint(paths_.checkpoint);
  spdlog::info("job {} attempt {}: restored the checkpoint of attempt {} ({} bytes)", job_.id,
               job_.attempt, job_.checkpoint_attempt, archive->size());
  LogLine("restored the checkpoint of attempt " + std::to_string(job_.checkpoint_attempt));
  return Status::Ok();
}

void JobRunner::LogLine(const std::string& text) {
  if (state_.log_fd < 0) return;
  const std::string line = "tide: " + text + "\n";
  if (WriteAll(state_.log_fd, line.data(), line.size()).ok()) state_.log_written += line.size();
}

// Reads what the job wrote (up to `timeout_ms` for the first byte, or until
// `exit_fd`, when not -1, says the main process exited) into the log file.
// Returns false at EOF: every writer is gone.
static bool PumpOnce(int fd, int exit_fd, int log_fd, int timeout_ms, std::atomic<int64_t>* written,
                     int64_t* unsignalled) {
  if (fd < 0) return false;
  pollfd p[2] = {{fd, POLLIN, 0}, {exit_fd, POLLIN, 0}};
  int r = ::poll(p, exit_fd >= 0 ? 2 : 1, timeout_ms);
  if (r <= 0 || p[0].revents == 0) return true;
  char buf[64 << 10];
  for (int i = 0; i < 16; ++i) {  // at most 1 MiB per call
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    Status st = WriteAll(log_fd, buf, static_cast<size_t>(n));
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());  // disk full: the bytes are lost
      continue;
    }
    *written += n;
    *unsignalled += n;
  }
  return true;
}

void JobRunner::BeginStop(Process* process, const std::string& reason, int64_t grace_s) {
  int64_t deadline_unix_s = deps_.clock->NowMs() / 1000 + grace_s;
  Status st = WriteFileAtomic(
      paths_.notice, "reason=" + reason + "\ndeadline=" + std::to_string(deadline_unix_s) + "\n");
  if (!st.ok()) spdlog::warn("job {}: notice file: {}", job_.id, st.ToString());
  spdlog::info("job {} attempt {}: stopping ({}), {} s grace", job_.id, job_.attempt, reason,
               grace_s);
  if (grace_s > 0) (void)process->Signal(SIGTERM);
}

void JobRunner::RunProcess(Process* process, int64_t start) {
  const int64_t runtime_deadline =
      job_.spec.max_runtime_s > 0 ? start + job_.spec.max_runtime_s * 1000 : INT64_MAX;
  std::string reason;  // ours, once we decided to stop the job
  int64_t kill_at = INT64_MAX;
  bool killed = false;
  std::string kill_error;
  std::optional<ExitStatus> exit;

  int64_t unsignalled = 0;
  std::optional<CpuPhase> watching(JobPhase::kWatch);
  for (;;) {
    bool open = PumpOnce(process->output_fd(), process->exit_fd(), state_.log_fd, 100,
                         &state_.log_written, &unsignalled);
    if (unsignalled >= kShipThresholdBytes) {
      unsignalled = 0;
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.ship_now = true;
      state_.cv.notify_all();
    }
    if (!open) {
      // EOF on the pipe: all writers closed it, but the main process may live on.
      if (int exit_fd = process->exit_fd(); exit_fd >= 0) {
        pollfd p{exit_fd, POLLIN, 0};
        ::poll(&p, 1, 100);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    exit = process->Poll();
    if (exit) break;
    const int64_t now = deps_.clock->MonotonicMs();
    std::string order_reason;
    int64_t order_grace = -1;
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      if (state_.stop_ordered) {
        state_.stop_ordered = false;
        order_reason = state_.stop_reason;
        order_grace = state_.stop_grace_s;
      }
    }
    if (order_grace < 0 && reason.empty() && now >= runtime_deadline) {
      order_reason = "timeout";
      order_grace = job_.spec.grace_s;
    }
    if (order_grace >= 0) {
      if (reason.empty()) {
        reason = order_reason;
        BeginStop(process, reason, order_grace);
      }
      kill_at = std::min(kill_at, now + order_grace * 1000);
    }
    if (!killed && now >= kill_at) {
      Status st = process->KillTree();
      killed = true;
      if (!st.ok()) {
        kill_error = st.message();
        spdlog::error("job {}: {}", job_.id, kill_error);
        exit = process->Poll();
        if (!exit) break;
      }
    }
  }
  // The main process is gone: nothing of the job may outlive it.
  watching.reset();
  CpuPhase killing(JobPhase::kKill);
  Status st = process->KillTree();
  if (!st.ok()) {
    kill_error = st.message();
    spdlog::error("job {}: {}", job_.id, kill_error);
  }
  int64_t drain_until = deps_.clock->MonotonicMs() + kDrainTimeoutMs;
  while (PumpOnce(process->output_fd(), -1, state_.log_fd, 50, &state_.log_written, &unsignalled) &&
         deps_.clock->MonotonicMs() < drain_until) {
  }
  if (!exit) exit = process->Poll();

  api::JobEvent ev;
  ev.attempt = job_.attempt;
  ev.state = "exited";
  ExitStatus e = exit.value_or(ExitStatus{0, SIGKILL});
  ev.exit_code = e.ShellCode();
  if (!reason.empty()) {
    ev.reason = reason;
    ev.message = "stopped (" + reason + "): " + e.ToString();
  } else if (e.oom) {
    ev.reason = "oom";
    ev.message = "killed by the kernel: the job used more than its memory (resources.memory)";
  } else if (e.signal != 0) {
    ev.reason = "signal:" + std::to_string(e.signal);
    ev.message = "killed by " + e.ToString();
  } else {
    ev.message = e.ToString();
  }
  if (!kill_error.empty()) ev.message += "; " + kill_error;
  spdlog::info("job {} attempt {}: exited: {}{}", job_.id, job_.attempt, e.ToString(),
               reason.empty() ? "" : " (" + reason + ")");
  std::lock_guard<std::mutex> lock(state_.mu);
  state_.outcome = ev;
}

}  // namespace tide::agent
