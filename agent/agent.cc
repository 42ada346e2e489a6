// RunAgent: wires the agent together.
//
//   main thread      signals and shutdown; reaps finished JobRunners
//   heartbeat thread every heartbeat_interval_ms: GPU telemetry + the jobs
//                    still running or still reporting; acts on the cancels
//                    (and assignments) in the answer
//   poll thread      long-polls /v1/agent/assignments?wait=25 and starts a
//                    JobRunner per new (job_id, attempt)
//   JobRunner        two threads per attempt (see job_runner.h)
// Every thread talks to the server through one ServerLink (server_link.h):
// HTTP to --server, or the link the host process passed in.
//
// Deduplication: the server may deliver the same (job_id, attempt) again
// (after its restart, or on both the poll and a heartbeat). An attempt that
// runs, that finished here, or that was cancelled before it arrived is never
// started twice. A job stays in the heartbeat's running list until its
// "exited" event is acknowledged, so the server never mistakes a job that is
// still reporting for a lost one.
#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "agent/gpu/fake_gpu_source.h"
#include "agent/gpu/nvml_gpu_source.h"
#include "agent/http_server_link.h"
#include "agent/job_cpu.h"
#include "agent/job_runner.h"
#include "agent/node_identity.h"
#include "agent/runtime/oci.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/sandbox.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/tls.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;

// How the agent trusts an https:// server: --ca-file, --pin, the pins its
// join token carries and those the server announced since (kept in
// DATA_DIR/server.pins, so a later start with only node.token still
// verifies the same server, across a rotation to its next key). Sets
// *join_secret to the join token without its pins.
Result<api::TlsTrust> ServerTrust(const AgentOptions& o, const std::string& data_dir,
                                  std::string* join_secret) {
  api::TlsTrust trust{o.ca_file, o.pins};
  auto trust_pin = [&trust](const std::string& p) {
    if (std::find(trust.pins.begin(), trust.pins.end(), p) == trust.pins.end()) trust.pins.push_back(p);
  };
  std::string pins_path = data_dir + "/server.pins";
  std::vector<std::string> saved;
  if (auto text = ReadFile(pins_path); text.ok()) {
    std::string joined;
    for (char c : *text) joined += c == '\n' ? ',' : c;
    while (!joined.empty() && joined.back() == ',') joined.pop_back();
    auto parsed = tls::ParsePins(joined, pins_path);
    if (!parsed.ok()) return parsed.status();
    saved = *parsed;
  }
  std::vector<std::string> keep = saved;
  join_secret->clear();
  if (!o.join_token.empty()) {
    auto parts = tls::SplitJoinToken(o.join_token, "--join-token");
    if (!parts.ok()) return parts.status();
    *join_secret = parts->secret;
    for (const auto& p : parts->pins) {
      if (std::find(keep.begin(), keep.end(), p) == keep.end()) keep.push_back(p);
    }
  }
  if (keep != saved) {
    std::string text;
    for (const auto& p : keep) text += p + "\n";
    TIDE_RETURN_IF_ERROR(WriteFileAtomic(pins_path, text, 0600));
  }
  for (const auto& p : keep) trust_pin(p);
  if (o.server.rfind("http://", 0) == 0 && !trust.pins.empty()) {
    spdlog::warn("--server {} is plain http://: the pins are not used, and tokens cross the "
                 "network in clear text",
                 o.server);
  }
  return trust;
}

constexpr int kPollWaitS = 25;
constexpr size_t kRememberedAttempts = 10'000;
constexpr int64_t kAbandonGraceMs = 3'000;  // for blocked uploads after abandoning

std::string Key(const std::string& job_id, int attempt) {
  return job_id + "#" + std::to_string(attempt);
}

int64_t MonoMs() { return SystemClock::Default()->MonotonicMs(); }

// The utilisation a fake GPU shows for a job: its TIDE_FAKE_GPU_UTILIZATION
// (0-100), else kFakeBusyUtilizationPct. Real GPUs measure instead.
int FakeUtilizationOf(const std::map<std::string, std::string>& env) {
  auto it = env.find(kFakeUtilizationEnv);
  if (it == env.end() || it->second.empty() || it->second.size() > 3) {
    return kFakeBusyUtilizationPct;
  }
  int pct = 0;
  for (char c : it->second) {
    if (c < '0' || c > '9') return kFakeBusyUtilizationPct;
    pct = pct * 10 + (c - '0');
  }
  return std::min(pct, 100);
}

// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it
// starts afterwards) and receives them synchronously.
class SignalWatcher {
 public:
  SignalWatcher(bool enabled, const std::atomic<bool>* external)
      : enabled_(enabled), external_(external) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    if (enabled_) pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SignalWatcher() {
    if (enabled_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

  // Waits up to `ms` for a stop request; returns how many have arrived so
  // far (signals, plus one for the external flag).
  int Wait(int64_t ms) {
    if (enabled_) {
      timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
      int sig = sigtimedwait(&set_, nullptr, &ts);
      if (sig > 0) {
        ++signals_;
        spdlog::info("received {}", strsignal(sig));
      }
    } else if (ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    return signals_ + (external_ != nullptr && external_->load() ? 1 : 0);
  }

 private:
  bool enabled_;
  const std::atomic<bool>* external_;
  sigset_t set_;
  sigset_t old_;
  int signals_ = 0;
};

class Agent : public std::enable_shared_from_this<Agent> {
 public:
  explicit Agent(AgentOptions options) : options_(std::move(options)) {}
  int Run();

 private:
  Status Setup(SignalWatcher* signals);
  Status SetupRuntime();
  void HeartbeatLoop();
  void PollLoop();
  void HandleWork(const api::AgentWork& work, const char* from);
  // Keeps the pins a pinned server announced (its certificate's and its
  // next key's), in memory and in DATA_DIR/server.pins.
  void AdoptServerPins(const std::vector<std::string>& announced);
  // Saves the node token a heartbeat answer renewed, then calls with it.
  void AdoptNodeToken(const std::string& token);
  // Destroys runners that are done; returns how many remain.
  size_t ReapDone();
  void StopAll(const std::string& reason);
  void AbandonAll();
  int Shutdown(SignalWatcher* signals, int stops_seen);

  AgentOptions options_;
  std::string data_dir_;  // absolute
  std::string name_;
  std::unique_ptr<HttpServerLink> http_;  // without options_.server_link
  ServerLink* server_ = nullptr;          // the one in use
  std::unique_ptr<GpuSource> gpu_source_;  // used by the heartbeat thread once running
  std::vector<api::Gpu> gpus_;
  NodeIdentity identity_;
  std::unique_ptr<CgroupManager> cgroups_;  // null when this host gives the agent none
  std::unique_ptr<ProcessRuntime> processes_;
  std::unique_ptr<SandboxRuntime> sandbox_;  // with --runtime sandbox
  std::unique_ptr<OciRuntime> oci_;          // with --runtime oci
  Runtime* runtime_ = nullptr;               // what jobs run in: one of the above
  std::vector<std::string> images_;          // what it offers jobs

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<JobRunner>> runners_;  // by Key()
  std::set<std::string> finished_;                             // recent finished attempts
  std::deque<std::string> finished_order_;
  std::set<std::string> cancelled_unknown_;  // cancelled before they arrived
  bool stopping_ = false;                    // no new jobs

  std::atomic<bool> revoked_{false};
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  std::thread heartbeat_;
};

Status Agent::Setup(SignalWatcher* signals) {
  std::error_code ec;
  if (!fs::exists(options_.data_dir, ec)) {
    fs::create_directories(options_.data_dir, ec);
    if (ec) return Status::Internal("create data dir " + options_.data_dir + ": " + ec.message());
    ::chmod(options_.data_dir.c_str(), 0700);  // holds the node token
  }
  data_dir_ = fs::absolute(options_.data_dir).lexically_normal().string();
  while (data_dir_.size() > 1 && data_dir_.back() == '/') data_dir_.pop_back();
  // Attempts a previous run of the agent left (it was killed, or gave
  // jobs up on a second signal): the server has ended them or delivers
  // them again to start clean, so nothing of them is kept.
  for (const auto& entry : fs::directory_iterator(data_dir_ + "/jobs", ec)) {
    spdlog::info("removing {} left by an earlier run", entry.path().string());
    fs::remove_all(entry.path(), ec);
  }
  fs::create_directories(data_dir_ + "/jobs", ec);

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  name_ = options_.name.empty() ? host : options_.name;

  if (!options_.fake_gpus.empty()) {
    auto fake = FakeGpuSource::Create(options_.fake_gpus, name_);
    if (!fake.ok()) return fake.status();
    gpu_source_ = std::move(*fake);
  } else {
    auto nvml = NvmlGpuSource::Create();
    if (!nvml.ok()) return nvml.status();
    gpu_source_ = std::move(*nvml);
  }
  auto gpus = gpu_source_->Discover();
  if (!gpus.ok()) return gpus.status().WithContext("discover GPUs");
  gpus_ = std::move(*gpus);
  if (gpus_.empty()) spdlog::warn("no GPUs found: only jobs that ask for no GPU can run here");
  for (const api::Gpu& g : gpus_) {
    spdlog::info("gpu {}: {} ({}, {} MiB) {}", g.index, g.name, g.model, g.memory_mb, g.uuid);
  }

  processes_ = std::make_unique<ProcessRuntime>();
  // A cgroup per job, under the agent's own, for its limits and its kill.
  auto layout = DetectCgroups();
  if (layout.ok()) {
    CgroupManager::RemoveStale(*layout, "tide-agent-");
    // Unique per agent, not only per process: an agent that stopped may
    // still be going away (its poll thread) when the next one starts.
    static std::atomic<int> agents{0};
    auto made = CgroupManager::Create(
        *layout, "tide-agent-" + std::to_string(::getpid()) + "-" + std::to_string(agents++));
    if (made.ok()) {
      cgroups_ = std::move(made).value();
      processes_->set_cgroups(cgroups_.get());
      spdlog::info("job cgroups: {}", layout->Describe());
    } else {
      spdlog::warn("no job cgroups ({}): memory, CPU and process limits are not enforced",
                   made.status().message());
    }
  } else {
    spdlog::warn("no job cgroups ({}): memory, CPU and process limits are not enforced",
                 layout.status().message());
  }
  TIDE_RETURN_IF_ERROR(SetupRuntime());

  api::RegisterRequest req;
  req.name = name_;
  req.hostname = host;
  req.gpus = gpus_;
  req.labels = options_.labels;
  req.address = options_.advertise_addr;
  req.prices = options_.prices;
  req.images = images_;
  req.runtime = options_.runtime;
  req.cpus = options_.cpus > 0 ? options_.cpus : static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
  req.memory_mb = options_.memory_mb > 0
                      ? options_.memory_mb
                      : static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) /
                            (1024 * 1024);
  std::string join_secret = options_.join_token;
  if (options_.server_link != nullptr) {
    server_ = options_.server_link;
  } else {
    auto trust = ServerTrust(options_, data_dir_, &join_secret);
    if (!trust.ok()) return trust.status();
    auto http = HttpServerLink::Create(options_.server, *trust);
    if (!http.ok()) return http.status().WithContext("--server");
    http_ = std::move(*http);
    server_ = http_.get();
  }
  RegisterOptions ro;
  ro.link = server_;
  ro.server = options_.server;
  ro.data_dir = data_dir_;
  ro.join_token = join_secret;
  ro.should_stop = [signals] { return signals->Wait(0) > 0; };
  auto identity = Register(ro, req);
  if (!identity.ok()) return identity.status();
  identity_ = std::move(*identity);
  server_->set_node_token(identity_.node_token);
  return Status::Ok();
}

Status Agent::SetupRuntime() {
  if (options_.runtime == "process") {
    if (!options_.insecure_process_runtime) {
      return Status::InvalidArgument(
          "--runtime process runs jobs as the agent's user, able to read its token and everything "
          "else on this machine: it is for development only, pass --insecure-process-runtime too");
    }
    spdlog::warn("runtime: process (INSECURE: jobs run as uid {} and see the whole host)",
                 ::geteuid());
    runtime_ = processes_.get();
    images_ = {"host"};
    return Status::Ok();
  }
  if (options_.runtime != "sandbox" && options_.runtime != "oci") {
    return Status::InvalidArgument("--runtime: want sandbox, oci or process, got \"" +
                                   options_.runtime + "\"");
  }
  if (options_.runtime != "oci" && !options_.images.empty()) {
    return Status::InvalidArgument("--image: images run in containers, which need --runtime oci",
                                   "image");
  }
  auto uids = ParseUidRange(options_.job_uids);
  if (!uids.ok()) return uids.status();
  if (options_.runtime == "oci") {
    auto images = ParseOciImages(options_.images);
    if (!images.ok()) return images.status();
    OciOptions oo;
    oo.state_dir = data_dir_ + "/oci";
    oo.images = *images;
    oo.uids = *uids;
    oo.lock_dir = options_.uid_lock_dir;
    oo.gpu_dev_root = options_.gpu_dev_root;
    auto oci = OciRuntime::Create(std::move(oo), processes_.get(), cgroups_.get());
    if (!oci.ok()) return oci.status().WithContext("--runtime oci");
    oci_ = std::move(*oci);
    runtime_ = oci_.get();
    for (const auto& [name, rootfs] : oci_->options().images) {
      images_.push_back(name);
      spdlog::info("image {}: {}", name, rootfs);
    }
    spdlog::info("runtime: oci ({} at {}, job uids {}, seccomp{})", oci_->RuncVersion(),
                 oci_->options().runc, options_.job_uids, cgroups_ ? ", cgroups" : "");
    return Status::Ok();
  }
  SandboxOptions so;
  so.uids = *uids;
  so.lock_dir = options_.uid_lock_dir;
  so.gpu_dev_root = options_.gpu_dev_root;
  so.hidden = {data_dir_};
  auto sandbox = SandboxRuntime::Create(std::move(so), processes_.get());
  if (!sandbox.ok()) return sandbox.status().WithContext("--runtime sandbox");
  sandbox_ = std::move(*sandbox);
  runtime_ = sandbox_.get();
  images_ = {"host"};
  spdlog::info("runtime: sandbox (bubblewrap {}, job uids {}, seccomp{})", sandbox_->options().bwrap,
               options_.job_uids, cgroups_ ? ", cgroups" : "");
  return Status::Ok();
}

int Agent::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  SignalWatcher signals(options_.handle_signals, options_.stop);
  Status st = Setup(&signals);
  if (!st.ok()) {
    if (signals.Wait(0) > 0) return 0;  // asked to stop while waiting for the server
    spdlog::error("agent: {}", st.message());
    return 1;
  }
  spdlog::info("agent {} ({}) serving {} GPU(s) for {}, data in {}", name_, identity_.node_id,
               gpus_.size(), options_.server, data_dir_);

  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  // The long-poll cannot be interrupted: the thread is detached and keeps the
  // agent alive (shared_ptr) until its current poll returns.
  std::thread([self = shared_from_this()] { self->PollLoop(); }).detach();

  int stops = 0;
  while (stops == 0 && !revoked_) {
    stops = signals.Wait(200);
    ReapDone();
  }
  return Shutdown(&signals, stops);
}

int Agent::Shutdown(SignalWatcher* signals, int stops_seen) {
  int code = 0;
  if (revoked_) {
    spdlog::error("the server rejected this node's token (revoked): stopping all jobs");
    code = 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    AbandonAll();
  } else {
    StopAll("agent_shutdown");
  }
  int64_t report_deadline = INT64_MAX;
  int64_t abandon_deadline = revoked_ ? MonoMs() + kAbandonGraceMs : INT64_MAX;
  for (;;) {
    size_t left = ReapDone();
    if (left == 0) break;
    int stops = signals->Wait(100);
    if (stops > stops_seen && abandon_deadline == INT64_MAX) {
      spdlog::warn("second stop request: killing all jobs now");
      AbandonAll();
      abandon_deadline = MonoMs() + kAbandonGraceMs;
    }
    stops_seen = stops;
    bool all_ended = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, r] : runners_) all_ended = all_ended && r->process_finished();
    }
    if (all_ended && report_deadline == INT64_MAX) {
      report_deadline = MonoMs() + options_.shutdown_report_timeout_ms;
    }
    if (MonoMs() >= report_deadline && abandon_deadline == INT64_MAX) {
      spdlog::warn("the server did not acknowledge every job in time: giving up reporting");
      AbandonAll();
      abandon_deadline = MonoMs() + kAbandonGraceMs;
    }
    if (MonoMs() >= abandon_deadline) {
      // Threads stuck in an upload cannot be interrupted; leave them to exit.
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, r] : runners_) (void)r.release();
      runners_.clear();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(hb_mu_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (std::string cpu = CpuPerAttempt(); !cpu.empty()) {
    spdlog::info("agent CPU per attempt, by phase, {}", cpu);
  }
  spdlog::info("agent stopped");
  return code;
}

void Agent::StopAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  spdlog::info("stopping: {} job(s) get their grace period", runners_.size());
  stopping_ = true;
  for (auto& [key, r] : runners_) r->Stop(reason, r->grace_s());
}

void Agent::AbandonAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, r] : runners_) r->Abandon();
}

size_t Agent::ReapDone() {
  std::vector<std::unique_ptr<JobRunner>> done;
  size_t left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = runners_.begin(); it != runners_.end();) {
      if (!it->second->done()) {
        ++it;
        continue;
      }
      finished_.insert(it->first);
      finished_order_.push_back(it->first);
      if (finished_order_.size() > kRememberedAttempts) {
        finished_.erase(finished_order_.front());
        finished_order_.pop_front();
      }
      done.push_back(std::move(it->second));
      it = runners_.erase(it);
    }
    left = runners_.size();
  }
  done.clear();  // joins their threads, outside the lock
  return left;
}

void Agent::HandleWork(const api::AgentWork& work, const char* from) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const api::CancelOrder& c : work.cancels) {
    bool found = false;
    for (auto& [key, r] : runners_) {
      if (r->job_id() == c.job_id && (c.attempt == 0 || c.attempt == r->attempt())) {
        if (!r->process_finished()) {
          spdlog::info("job {} attempt {}: {} order ({} s grace)", c.job_id, r->attempt(), c.reason,
                       c.grace_s);
        }
        r->Stop(c.reason.empty() ? "cancelled" : c.reason, c.grace_s);
        found = true;
      }
    }
    std::string key = Key(c.job_id, c.attempt);
    if (!found && finished_.count(key) == 0) {
      if (cancelled_unknown_.size() > kRememberedAttempts) cancelled_unknown_.clear();
      cancelled_unknown_.insert(key);
    }
  }
  for (const api::Assignment& a : work.assignments) {
    const api::Job& job = a.job;
    std::string key = Key(job.id, job.attempt);
    if (runners_.count(key) != 0 || finished_.count(key) != 0) {
      spdlog::debug("job {} attempt {}: already known ({})", job.id, job.attempt, from);
      continue;
    }
    if (cancelled_unknown_.count(key) != 0) {
      spdlog::info("job {} attempt {}: cancelled before it arrived", job.id, job.attempt);
      continue;
    }
    if (stopping_) continue;  // the server requeues it once we are gone
    std::string gpus;
    for (int g : job.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    spdlog::info("job {} attempt {}: assigned ({}), gpus [{}]{}", job.id, job.attempt,
                 job.spec.name.empty() ? job.spec.command.front() : job.spec.name, gpus,
                 a.gang.nnodes > 1 ? " as rank " + std::to_string(a.gang.rank) + " of " +
                                         std::to_string(a.gang.nnodes)
                                   : std::string());
    RunnerDeps deps;
    deps.server = server_;
    deps.data_dir = data_dir_;
    deps.runtime = runtime_;
    deps.images = images_;
    deps.node_gpus = gpus_;
    deps.checkpoint_interval_ms = options_.checkpoint_interval_ms;
    deps.pids_limit = options_.job_pids_limit;
    deps.node_name = name_;
    auto runner = std::make_unique<JobRunner>(job, std::move(deps), a.gang);
    runner->Start();
    runners_[key] = std::move(runner);
  }
}

void Agent::HeartbeatLoop() {
  bool failing = false;
  for (;;) {
    api::Heartbeat hb;
    std::map<int, int> busy;  // GPU index -> what a fake GPU shows
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, r] : runners_) {
        if (r->done()) continue;
        hb.running.push_back({r->job_id(), r->attempt()});
        if (r->process_finished()) continue;
        const int pct = FakeUtilizationOf(r->env());
        for (int g : r->gpus()) busy[g] = pct;
      }
    }
    auto sample = gpu_source_->Sample(busy);
    hb.gpus = sample.ok() ? std::move(*sample) : gpus_;
    auto work = server_->Heartbeat(hb);
    if (work.ok()) {
      if (failing) spdlog::info("heartbeat: server reachable again");
      failing = false;
      if (!work->tls_pins.empty()) AdoptServerPins(work->tls_pins);
      if (!work->node_token.empty()) AdoptNodeToken(work->node_token);
      HandleWork(*work, "heartbeat");
    } else if (work.status().code() == Code::kUnauthenticated) {
      revoked_ = true;
      return;
    } else if (!failing) {
      spdlog::warn("heartbeat: {} (jobs keep running; retrying)", work.status().ToString());
      failing = true;
    }
    std::unique_lock<std::mutex> lock(hb_mu_);
    if (hb_cv_.wait_for(lock, std::chrono::milliseconds(options_.heartbeat_interval_ms),
                        [this] { return hb_stop_; })) {
      return;
    }
  }
}

void Agent::AdoptNodeToken(const std::string& token) {
  // Saved before it is used: once the server sees the new one, the old one
  // ends, and a restart must find the new one on disk. Unsaved, it is not
  // used, and the server offers another at the next heartbeat.
  if (Status st = WriteFileAtomic(NodeTokenPath(data_dir_), token + "\n", 0600); !st.ok()) {
    spdlog::warn("cannot save the renewed node token: {}", st.ToString());
    return;
  }
  server_->set_node_token(token);
  spdlog::info("node token renewed (saved in {})", NodeTokenPath(data_dir_));
}

void Agent::AdoptServerPins(const std::vector<std::string>& announced) {
  // Only a server already verified by a pin may name the pins that come
  // next: it answered over a connection that one of ours verified.
  if (http_ == nullptr || !http_->pinned()) return;
  std::vector<std::string> pins = options_.pins;  // --pin stays trusted
  for (const auto& p : announced) {
    if (std::find(pins.begin(), pins.end(), p) == pins.end()) pins.push_back(p);
  }
  if (!http_->SetPins(pins)) return;
  std::string text, list;
  for (const auto& p : announced) {
    text += p + "\n";
    list += (list.empty() ? "" : ", ") + p;
  }
  if (Status st = WriteFileAtomic(data_dir_ + "/server.pins", text, 0600); !st.ok()) {
    spdlog::warn("cannot save the server's pins: {}", st.ToString());
  }
  spdlog::info("server announced TLS pins {}: trusted from now on", list);
}

void Agent::PollLoop() {
  int64_t backoff_ms = 250;
  bool failing = false;
  auto stopping = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  };
  while (!stopping() && !revoked_) {
    auto work = server_->PollWork(kPollWaitS);
    if (stopping()) break;
    if (work.ok()) {
      if (failing) spdlog::info("poll: server reachable again");
      failing = false;
      backoff_ms = 250;
      HandleWork(*work, "poll");
      continue;
    }
    if (work.status().code() == Code::kUnauthenticated) {
      revoked_ = true;
      break;
    }
    if (!failing) spdlog::warn("poll: {} (retrying)", work.status().ToString());
    failing = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 2'000);
  }
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  // Inside another process (`tide dev`) the host has set up logging already.
  if (spdlog::default_logger()->name().empty() && !spdlog::get("agent")) {
    InitLogging("agent", options.log_level);
  }
  auto agent = std::make_shared<Agent>(options);
  return agent->Run();
}

}  // namespace tide::agent
