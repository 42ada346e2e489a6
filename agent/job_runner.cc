#include "agent/job_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "agent/log_shipper.h"
#include "common/archive.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/token.h"

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

// Names, sizes and modification times of everything under `dir`: two equal
// fingerprints mean nothing was written in between. "" for an empty or
// missing directory.
std::string CheckpointFingerprint(const std::string& dir) {
  std::vector<std::string> items;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied,
                                                  ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0) continue;
    items.push_back(it->path().lexically_relative(dir).generic_string() + "\t" +
                    std::to_string(sb.st_mode) + "\t" + std::to_string(sb.st_size) + "\t" +
                    std::to_string(sb.st_mtim.tv_sec) + "." + std::to_string(sb.st_mtim.tv_nsec));
  }
  if (items.empty()) return "";
  std::sort(items.begin(), items.end());
  std::string all;
  for (const auto& i : items) all += i + "\n";
  return Sha256Hex(all);
}

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

}  // namespace

JobPaths PathsFor(const std::string& data_dir, const std::string& job_id, int attempt) {
  JobPaths p;
  p.root = data_dir + "/jobs/" + job_id + "/" + std::to_string(attempt);
  p.work = p.root + "/work";
  p.output = p.root + "/output";
  p.checkpoint = p.root + "/checkpoint";
  // The agent writes the notice; the job may only read it.
  p.control = p.root + "/control";
  p.notice = p.control + "/notice";
  p.metrics = p.root + "/metrics.jsonl";
  p.log = p.root + "/log";
  return p;
}

std::map<std::string, std::string> BuildJobEnv(const api::Job& job, const api::Gang& gang,
                                               const JobPaths& paths,
                                               const std::vector<api::Gpu>& node_gpus,
                                               const std::string& node_name) {
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
  env["TIDE_METRICS_FILE"] = paths.metrics;
  if (job.attempt > 1) {
    env["TIDE_RESUMED"] = "1";
    for (const api::Attempt& a : job.attempts) {
      if (a.attempt == job.attempt - 1) env["TIDE_RESTART_REASON"] = a.reason;
    }
  }
  if (!job.batch.empty()) {
    env["TIDE_BATCH"] = job.batch;
    env["TIDE_TRIAL"] = job.trial;
    for (const auto& [name, value] : job.params) {
      std::string var = "TIDE_PARAM_";
      for (char c : name) {
        var += std::isalnum(static_cast<unsigned char>(c))
                   ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                   : '_';
      }
      env[var] = value;
    }
  }
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
  if (job.spec.slurm) {
    // What sbatch's scripts read; a value the spec set (the array task id,
    // ...) is the spec's. See docs/slurm.md.
    auto set = [&](const std::string& k, const std::string& v) { env.emplace(k, v); };
    set("SLURM_JOB_ID", job.id);
    set("SLURM_JOBID", job.id);
    set("SLURM_JOB_NAME", job.spec.name);
    set("SLURM_NNODES", std::to_string(gang.nnodes));
    set("SLURM_JOB_NUM_NODES", std::to_string(gang.nnodes));
    set("SLURM_NODEID", std::to_string(gang.rank));
    set("SLURM_PROCID", std::to_string(gang.rank));
    set("SLURM_NTASKS", std::to_string(gang.nnodes));
    set("SLURM_LOCALID", "0");
    set("SLURM_GPUS_ON_NODE", std::to_string(per_node));
    set("SLURM_JOB_GPUS", indices);
    set("SLURM_CPUS_PER_TASK",
        std::to_string(job.spec.resources.cpus > 0
                           ? static_cast<int64_t>(std::ceil(job.spec.resources.cpus))
                           : 1));
    if (job.spec.resources.memory_mb > 0) {
      set("SLURM_MEM_PER_NODE", std::to_string(job.spec.resources.memory_mb));
    }
    set("SLURM_SUBMIT_DIR", paths.work);
    set("SLURM_RESTART_COUNT", std::to_string(job.attempt - 1));
    set("SLURM_CLUSTER_NAME", "tide");
    if (!node_name.empty()) set("SLURMD_NODENAME", node_name);
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
      job_uid_ = process->uid();
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
  log_fd_ = ::open(paths_.log.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd_ < 0) return Status::Internal("open " + paths_.log + ": " + std::strerror(errno));
  {
    int fd = ::open(paths_.metrics.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                    0644);
    if (fd < 0) return Status::Internal("create " + paths_.metrics + ": " + std::strerror(errno));
    ::close(fd);
  }

  auto client = api::Client::Create(deps_.server, deps_.node_token);
  if (!client.ok()) return client.status();
  // Without its checkpoint a resumed job would silently start over: not
  // restoring it is a start failure.
  TIDE_RETURN_IF_ERROR(RestoreCheckpoint(client->get()));

  if (!job_.spec.code.empty()) {
    Result<std::string> archive = FetchPatiently([&] { return (*client)->GetCode(job_.id); });
    if (!archive.ok()) return archive.status().WithContext("fetch code archive " + job_.spec.code);
    Status st = UnpackArchive(*archive, paths_.work);
    if (!st.ok()) return st.WithContext("unpack code archive");
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
      std::lock_guard<std::mutex> lock(mu_);
      stop = stop_ordered_;
    }
    if (IsRejection(got.status()) || IsPermanent(got.status()) || stop || abandoned_ ||
        deps_.clock->MonotonicMs() >= give_up) {
      return got.status();
    }
    SleepUnlessAbandoned(backoff);
    backoff = std::min(backoff * 2, deps_.max_backoff_ms);
  }
}

// Whatever an earlier attempt left here locally is not trusted: the job
// resumes from what the server acknowledged, on whichever node it runs.
Status JobRunner::RestoreCheckpoint(api::Client* client) {
  std::error_code ec;
  fs::remove_all(paths_.checkpoint, ec);
  fs::create_directories(paths_.checkpoint, ec);
  if (ec) return Status::Internal("create " + paths_.checkpoint + ": " + ec.message());
  if (job_.checkpoint_attempt <= 0) return Status::Ok();
  Result<std::string> archive =
      FetchPatiently([&] { return client->GetCheckpoint(job_.id, job_.attempt); });
  if (!archive.ok() && archive.status().code() == Code::kNotFound &&
      archive.status().message().find("no checkpoint") != std::string::npos) {
    return Status::Ok();  // another rank of a gang saved one, this one none
  }
  if (!archive.ok()) return archive.status().WithContext("fetch the checkpoint");
  Status st = UnpackArchive(*archive, paths_.checkpoint);
  if (!st.ok()) return st.WithContext("unpack the checkpoint");
  checkpoint_sent_ = CheckpointFingerprint(paths_.checkpoint);
  spdlog::info("job {} attempt {}: restored the checkpoint of attempt {} ({} bytes)", job_.id,
               job_.attempt, job_.checkpoint_attempt, archive->size());
  std::string line = "tide: restored the checkpoint of attempt " +
                     std::to_string(job_.checkpoint_attempt) + "\n";
  if (WriteAll(log_fd_, line.data(), line.size()).ok()) log_written_ += line.size();
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
        Status st = client->PostMetrics(job_.id, job_.attempt, offset, data);
        if (st.code() == Code::kConflict || IsPermanent(st)) {
          spdlog::error("job {} attempt {}: the server refused metric lines at offset {} ({})",
                        job_.id, job_.attempt, offset, st.message());
          metrics_broken = true;
          return Status::Ok();
        }
        return st;
      },
      kMaxLogPost);
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
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(deps_.ship_interval_ms),
                   [this] { return ship_now_ || outcome_ready_ || abandoned_.load(); });
      ship_now_ = false;
      ended = outcome_ready_;
    }
    if (abandoned_ || rejected_) return finish();
    if (ended) break;
    if (deps_.clock->MonotonicMs() < next_try) continue;
    if (deps_.clock->MonotonicMs() >= next_checkpoint) {
      Call c = UploadCheckpoint(client, /*final=*/false);
      if (c == Call::kRejected || c == Call::kAbandoned) return finish();
      next_checkpoint = deps_.clock->MonotonicMs() + checkpoint_every;
    }
    int64_t metrics_end = CompleteLinesEnd(metrics_fd, metrics.sent());
    if (metrics_end > metrics.sent()) {
      Status st = metrics.Ship(metrics_end);
      if (IsRejection(st)) {
        MarkRejected("ship metrics", st);
        return finish();
      }
    }
    if (log_written_ == shipper.sent()) continue;
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
  if (c == Call::kOk) {
    c = Retry("ship metrics", [&] {
      int64_t end;
      while ((end = CompleteLinesEnd(metrics_fd, metrics.sent())) > metrics.sent()) {
        TIDE_RETURN_IF_ERROR(metrics.Ship(end));
      }
      return Status::Ok();
    });
  }
  // A job that completed needs no checkpoint; any other end may be
  // followed by another attempt that resumes from it.
  bool completed = outcome.reason.empty() && outcome.exit_code && *outcome.exit_code == 0;
  if (c == Call::kOk && !completed) c = UploadCheckpoint(client, /*final=*/true);
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
      // The server has the outputs and the checkpoint now; the log stays.
      std::error_code ec;
      fs::remove_all(paths_.work, ec);
      fs::remove_all(paths_.output, ec);
      fs::remove_all(paths_.checkpoint, ec);
    }
  }
  finish();
}

JobRunner::Call JobRunner::UploadCheckpoint(api::Client* client, bool final) {
  std::string before;
  Result<std::string> archive = std::string();
  {
    FsUidScope as_job(job_uid_);
    before = CheckpointFingerprint(paths_.checkpoint);
    if (before.empty() || before == checkpoint_sent_) return Call::kOk;
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
              [&] { return client->PutCheckpoint(job_.id, job_.attempt, *archive, digest); });
  } else {
    Status st = client->PutCheckpoint(job_.id, job_.attempt, *archive, digest);
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
    checkpoint_sent_ = before;
    spdlog::info("job {} attempt {}: checkpoint uploaded ({} bytes)", job_.id, job_.attempt,
                 archive->size());
  }
  return c;
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
    int fd;
    {
      FsUidScope as_job(job_uid_);
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
                   [&] { return client->PutOutput(job_.id, job_.attempt, *clean, data); });
    if (c != Call::kOk) return c;
  }
  return Call::kOk;
}

}  // namespace tide::agent
