#include "agent/job_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "agent/log_shipper.h"
#include "common/archive.h"
#include "common/log.h"
#include "common/paths.h"

namespace tide::agent {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kShipThresholdBytes = 256 << 10;  // wake the reporter early
constexpr size_t kMaxLogPost = 1 << 20;             // one POST of log bytes
constexpr int64_t kCodeFetchPatienceMs = 60'000;    // server restarts while fetching code
constexpr int64_t kDrainTimeoutMs = 2'000;          // reading the pipe after the tree died

bool IsRejection(const Status& st) {
  return st.code() == Code::kNotFound || st.code() == Code::kConflict;
}

// Errors that no retry can fix.
bool IsPermanent(const Status& st) {
  return st.code() == Code::kInvalidArgument || st.code() == Code::kPermissionDenied ||
         st.code() == Code::kTooLarge;
}

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

JobPaths PathsFor(const std::string& data_dir, const std::string& job_id, int attempt) {
  JobPaths p;
  p.root = data_dir + "/jobs/" + job_id + "/" + std::to_string(attempt);
  p.work = p.root + "/work";
  p.output = p.root + "/output";
  p.checkpoint = p.root + "/checkpoint";
  p.notice = p.root + "/notice";
  p.log = p.root + "/log";
  return p;
}

std::map<std::string, std::string> BuildJobEnv(const api::Job& job, const api::Gang& gang,
                                               const JobPaths& paths,
                                               const std::vector<api::Gpu>& node_gpus) {
  std::map<std::string, std::string> env = job.spec.env;
  std::string indices;
  std::string uuids;
  for (int index : job.gpus) {
    if (!indices.empty()) indices += ",";
    indices += std::to_string(index);
    for (const api::Gpu& g : node_gpus) {
      if (g.index == index) {
        if (!uuids.empty()) uuids += ",";
        uuids += g.uuid;
      }
    }
  }
  env["CUDA_VISIBLE_DEVICES"] = indices;
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["NVIDIA_VISIBLE_DEVICES"] = indices.empty() ? "void" : indices;
  env["TIDE_GPU_UUIDS"] = uuids;
  env["TIDE_JOB_ID"] = job.id;
  env["TIDE_ATTEMPT"] = std::to_string(job.attempt);
  env["TIDE_OUTPUT_DIR"] = paths.output;
  env["TIDE_CHECKPOINT_DIR"] = paths.checkpoint;
  env["TIDE_NOTICE_FILE"] = paths.notice;
  const int per_node = static_cast<int>(job.gpus.size());
  env["TIDE_NODE_RANK"] = std::to_string(gang.rank);
  env["TIDE_NNODES"] = std::to_string(gang.nnodes);
  env["TIDE_GPUS_PER_NODE"] = std::to_string(per_node);
  if (gang.nnodes > 1) {
    // Only for a gang: single-node scripts read WORLD_SIZE > 1 as "I was
    // launched distributed", and a spec's own value stays theirs.
    env["WORLD_SIZE"] = std::to_string(gang.nnodes * per_node);
    env["MASTER_ADDR"] = gang.master_addr;
    env["MASTER_PORT"] = std::to_string(gang.master_port);
  }
  return env;
}

JobRunner::JobRunner(api::Job job, RunnerDeps deps, api::Gang gang)
    : job_(std::move(job)), gang_(std::move(gang)), deps_(std::move(deps)) {
  paths_ = PathsFor(deps_.data_dir, IsSafeJobId(job_.id) ? job_.id : "_invalid", job_.attempt);
}

JobRunner::~JobRunner() {
  if (!done_.load()) Abandon();
  if (control_.joinable()) control_.join();
  if (reporter_.joinable()) reporter_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
}

void JobRunner::Start() {
  control_ = std::thread([this] { ControlMain(); });
  reporter_ = std::thread([this] { ReporterMain(); });
}

void JobRunner::Stop(const std::string& reason, int64_t grace_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_reason_.empty()) stop_reason_ = reason;
  grace_s = std::max<int64_t>(grace_s, 0);
  if (stop_grace_s_ < 0 || grace_s < stop_grace_s_) stop_grace_s_ = grace_s;
  stop_ordered_ = true;
  cv_.notify_all();
}

void JobRunner::Abandon() {
  abandoned_ = true;
  Stop("abandoned", 0);
}

void JobRunner::SleepUnlessAbandoned(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return abandoned_.load(); });
}

// ------------------------------------------------------------------ control

void JobRunner::ControlMain() {
  api::JobEvent outcome;
  outcome.attempt = job_.attempt;
  outcome.state = "exited";

  LaunchSpec spec;
  Status prepared = Prepare(&spec);
  std::unique_ptr<Process> process;
  bool stopped_early = false;
  if (prepared.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_early = stop_ordered_;
    if (stopped_early) {
      outcome.reason = stop_reason_;
      outcome.message = "stopped before the job started";
    }
  }
  if (prepared.ok() && !stopped_early) {
    Result<std::unique_ptr<Process>> started = deps_.runtime->Start(spec);
    if (started.ok()) {
      process = std::move(*started);
    } else {
      prepared = started.status();
    }
  }
  if (!prepared.ok() && !stopped_early) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ordered_) {  // e.g. cancelled while the code was being fetched
      stopped_early = true;
      outcome.reason = stop_reason_;
      outcome.message = "stopped before the job started";
    }
  }
  if (!prepared.ok() && !stopped_early) {
    outcome.reason = "start_failed";
    outcome.message = prepared.message();
    spdlog::warn("job {} attempt {}: start failed: {}", job_.id, job_.attempt, prepared.message());
    if (log_fd_ >= 0) {
      std::string line = "tide: start failed: " + prepared.message() + "\n";
      if (WriteAll(log_fd_, line.data(), line.size()).ok()) log_written_ += line.size();
    }
  }
  if (process) {
    spdlog::info("job {} attempt {}: started pid {} on gpus [{}]", job_.id, job_.attempt,
                 process->pid(), spec.env["CUDA_VISIBLE_DEVICES"]);
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = true;
    }
    cv_.notify_all();
    RunProcess(process.get());
    process.reset();
    std::lock_guard<std::mutex> lock(mu_);
    outcome = outcome_;
  }
  process_finished_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcome_ = outcome;
    outcome_ready_ = true;
  }
  cv_.notify_all();
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
  if (!job_.spec.image.empty() && job_.spec.image != "host") {
    return Status::InvalidArgument("image \"" + job_.spec.image +
                                   "\" is not supported by this agent (it runs image \"host\")");
  }

  // A re-delivered attempt (e.g. after an agent restart) starts clean; the
  // checkpoint is kept.
  std::error_code ec;
  fs::remove_all(paths_.work, ec);
  fs::remove_all(paths_.output, ec);
  fs::remove(paths_.notice, ec);
  for (const std::string& dir : {paths_.work, paths_.output, paths_.checkpoint}) {
    fs::create_directories(dir, ec);
    if (ec) return Status::Internal("create " + dir + ": " + ec.message());
  }
  log_fd_ = ::open(paths_.log.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd_ < 0) return Status::Internal("open " + paths_.log + ": " + std::strerror(errno));
  Status restored = RestoreCheckpoint();
  if (!restored.ok()) {
    spdlog::warn("job {}: checkpoint not restored: {}", job_.id, restored.ToString());
  }

  if (!job_.spec.code.empty()) {
    auto client = api::Client::Create(deps_.server, deps_.node_token);
    if (!client.ok()) return client.status();
    int64_t give_up = deps_.clock->MonotonicMs() + kCodeFetchPatienceMs;
    int64_t backoff = deps_.min_backoff_ms;
    for (;;) {
      Result<std::string> archive = (*client)->GetCode(job_.id);
      if (archive.ok()) {
        Status st = UnpackArchive(*archive, paths_.work);
        if (!st.ok()) return st.WithContext("unpack code archive");
        break;
      }
      bool stop;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop = stop_ordered_;
      }
      if (IsRejection(archive.status()) || IsPermanent(archive.status()) || stop || abandoned_ ||
          deps_.clock->MonotonicMs() >= give_up) {
        return archive.status().WithContext("fetch code archive " + job_.spec.code);
      }
      SleepUnlessAbandoned(backoff);
      backoff = std::min(backoff * 2, deps_.max_backoff_ms);
    }
  }

  spec->argv = job_.spec.command;
  spec->env = BuildJobEnv(job_, gang_, paths_, deps_.node_gpus);
  spec->work_dir = paths_.work;
  spec->output_fd = -1;
  spec->tag = {"TIDE_JOB_ID=" + job_.id, "TIDE_ATTEMPT=" + std::to_string(job_.attempt)};
  return Status::Ok();
}

// A retry landing on this node again finds the checkpoint of the latest
// earlier attempt that left one.
Status JobRunner::RestoreCheckpoint() {
  std::error_code ec;
  if (!fs::is_empty(paths_.checkpoint, ec) || ec) return Status::Ok();
  fs::path job_dir = fs::path(paths_.root).parent_path();
  int best = 0;
  for (const auto& entry : fs::directory_iterator(job_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos ||
        name.size() > 9) {
      continue;
    }
    int n = std::stoi(name);
    fs::path cp = entry.path() / "checkpoint";
    if (n < job_.attempt && n > best && fs::is_directory(cp, ec) && !fs::is_empty(cp, ec)) {
      best = n;
    }
  }
  if (best == 0) return Status::Ok();
  fs::path from = job_dir / std::to_string(best) / "checkpoint";
  fs::copy(from, paths_.checkpoint, fs::copy_options::recursive | fs::copy_options::skip_symlinks,
           ec);
  if (ec) return Status::Internal("copy " + from.string() + ": " + ec.message());
  spdlog::info("job {} attempt {}: restored checkpoint of attempt {}", job_.id, job_.attempt, best);
  return Status::Ok();
}

// Reads what the job wrote (up to `timeout_ms` for the first byte) into the
// log file. Returns false at EOF: every writer is gone.
static bool PumpOnce(int fd, int log_fd, int timeout_ms, std::atomic<int64_t>* written,
                     int64_t* unsignalled) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (r <= 0) return true;
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

void JobRunner::RunProcess(Process* process) {
  const int64_t start = deps_.clock->MonotonicMs();
  const int64_t runtime_deadline =
      job_.spec.max_runtime_s > 0 ? start + job_.spec.max_runtime_s * 1000 : INT64_MAX;
  std::string reason;  // ours, once we decided to stop the job
  int64_t kill_at = INT64_MAX;
  bool killed = false;
  std::string kill_error;
  std::optional<ExitStatus> exit;

  int64_t unsignalled = 0;
  for (;;) {
    bool open = PumpOnce(process->output_fd(), log_fd_, 100, &log_written_, &unsignalled);
    if (unsignalled >= kShipThresholdBytes) {
      unsignalled = 0;
      std::lock_guard<std::mutex> lock(mu_);
      ship_now_ = true;
      cv_.notify_all();
    }
    if (!open) {
      // EOF on the pipe: all writers closed it, but the main process may live on.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    exit = process->Poll();
    if (exit) break;
    const int64_t now = deps_.clock->MonotonicMs();
    std::string order_reason;
    int64_t order_grace = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ordered_) {
        stop_ordered_ = false;
        order_reason = stop_reason_;
        order_grace = stop_grace_s_;
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
  Status st = process->KillTree();
  if (!st.ok()) {
    kill_error = st.message();
    spdlog::error("job {}: {}", job_.id, kill_error);
  }
  int64_t drain_until = deps_.clock->MonotonicMs() + kDrainTimeoutMs;
  while (PumpOnce(process->output_fd(), log_fd_, 50, &log_written_, &unsignalled) &&
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
  } else if (e.signal != 0) {
    ev.reason = "signal:" + std::to_string(e.signal);
    ev.message = "killed by " + e.ToString();
  } else {
    ev.message = e.ToString();
  }
  if (!kill_error.empty()) ev.message += "; " + kill_error;
  spdlog::info("job {} attempt {}: exited: {}{}", job_.id, job_.attempt, e.ToString(),
               reason.empty() ? "" : " (" + reason + ")");
  std::lock_guard<std::mutex> lock(mu_);
  outcome_ = ev;
}

// ----------------------------------------------------------------- reporter

void JobRunner::MarkRejected(const std::string& what, const Status& st) {
  spdlog::warn("job {} attempt {}: the server no longer wants it ({}: {}): killing it", job_.id,
               job_.attempt, what, st.ToString());
  rejected_ = true;
  Stop("rejected", 0);
}

JobRunner::Call JobRunner::Retry(const std::string& what, const std::function<Status()>& fn) {
  int64_t backoff = deps_.min_backoff_ms;
  for (int failures = 0;; ++failures) {
    if (abandoned_) return Call::kAbandoned;
    if (rejected_) return Call::kRejected;
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
    SleepUnlessAbandoned(backoff);
    backoff = std::min(backoff * 2, deps_.max_backoff_ms);
  }
}

void JobRunner::ReporterMain() {
  auto finish = [this] {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return outcome_ready_; });
    done_ = true;
  };
  auto created = api::Client::Create(deps_.server, deps_.node_token);
  if (!created.ok()) {
    spdlog::error("job {}: {}", job_.id, created.status().ToString());
    abandoned_ = true;
    return finish();
  }
  api::Client* client = created->get();

  bool started;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return started_ || outcome_ready_; });
    started = started_;
  }
  if (started) {
    api::JobEvent running;
    running.attempt = job_.attempt;
    running.state = "running";
    if (Retry("report running", [&] { return client->PostEvent(job_.id, running); }) != Call::kOk) {
      return finish();
    }
  }

  // A 409 on the log endpoint is a gap (the server lost bytes it had
  // acknowledged), not a rejection of the job: the log stops there, the job
  // goes on, and the whole log stays in the local file.
  bool log_broken = false;
  LogShipper shipper(
      log_fd_,
      [&](int64_t offset, std::string_view data) {
        if (log_broken) return Status::Ok();
        Status st = client->PostLogs(job_.id, job_.attempt, offset, data);
        if (st.code() == Code::kConflict) {
          spdlog::error(
              "job {} attempt {}: the server refused log bytes at offset {} ({}); "
              "no more log is shipped, the full log stays in {}",
              job_.id, job_.attempt, offset, st.message(), paths_.log);
          log_broken = true;
          return Status::Ok();
        }
        return st;
      },
      kMaxLogPost);
  // While the job runs: ship every interval (or sooner when much is
  // pending); on failure back off, and never block the job.
  int64_t backoff = deps_.min_backoff_ms;
  int64_t next_try = 0;
  for (;;) {
    bool ended;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(deps_.ship_interval_ms),
                   [this] { return ship_now_ || outcome_ready_ || abandoned_.load(); });
      ship_now_ = false;
      ended = outcome_ready_;
    }
    if (abandoned_ || rejected_) return finish();
    if (ended) break;
    if (deps_.clock->MonotonicMs() < next_try || log_written_ == shipper.sent()) continue;
    Status st = shipper.Ship(log_written_);
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
    std::lock_guard<std::mutex> lock(mu_);
    outcome = outcome_;
  }
  Call c = Retry("ship log", [&] { return shipper.Ship(log_written_); });
  if (c == Call::kOk) c = UploadOutputs(client);
  if (c == Call::kOk) {
    // If an earlier try reached the server but its answer was lost, the
    // server has released the attempt and answers 409: that is our ack.
    int tries = 0;
    c = Retry("report exit", [&] {
      Status st = client->PostEvent(job_.id, outcome);
      if (st.code() == Code::kConflict && ++tries > 1) return Status::Ok();
      if (st.code() != Code::kConflict) ++tries;
      return st;
    });
    if (c == Call::kOk) {
      spdlog::info("job {} attempt {}: reported exit (exit_code {}, reason \"{}\")", job_.id,
                   job_.attempt, outcome.exit_code.value_or(-1), outcome.reason);
      // The server has the outputs now; the log and checkpoint stay.
      std::error_code ec;
      fs::remove_all(paths_.work, ec);
      fs::remove_all(paths_.output, ec);
    }
  }
  finish();
}

JobRunner::Call JobRunner::UploadOutputs(api::Client* client) {
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
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
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
                   [&] { return client->PutOutput(job_.id, job_.attempt, *clean, data); });
    if (c != Call::kOk) return c;
  }
  return Call::kOk;
}

}  // namespace tide::agent
