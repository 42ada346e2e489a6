#include "agent/testing/fake_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tide::agent::testing {
namespace {

class FakeProcess final : public Process {
 public:
  explicit FakeProcess(std::shared_ptr<FakeJob> job) : job_(std::move(job)) {}
  ~FakeProcess() override { job_->KillTree(); }

  int pid() const override { return 0; }
  int output_fd() const override { return job_->output_fd(); }
  std::optional<ExitStatus> Poll() override { return job_->Poll(); }
  std::optional<ExitStatus> Wait(int64_t timeout_ms) override { return job_->Wait(timeout_ms); }
  Status Signal(int sig) override {
    job_->Signal(sig);
    return Status::Ok();
  }
  Status KillTree() override {
    job_->KillTree();
    return Status::Ok();
  }

 private:
  std::shared_ptr<FakeJob> job_;
};

}  // namespace

FakeJob::FakeJob(LaunchSpec spec) : spec_(std::move(spec)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    ::fcntl(read_fd_, F_SETFL, ::fcntl(read_fd_, F_GETFL) | O_NONBLOCK);
  }
}

FakeJob::~FakeJob() {
  if (write_fd_ >= 0) ::close(write_fd_);
  if (read_fd_ >= 0) ::close(read_fd_);
}

void FakeJob::Write(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  while (write_fd_ >= 0 && !text.empty()) {
    ssize_t n = ::write(write_fd_, text.data(), text.size());
    if (n <= 0) break;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

void FakeJob::ExitLocked(ExitStatus status) {
  if (!exit_) exit_ = status;
  cv_.notify_all();
}

void FakeJob::Exit(ExitStatus status) {
  std::lock_guard<std::mutex> lock(mu_);
  ExitLocked(status);
}

void FakeJob::ExitOnSignal(int sig, ExitStatus status) {
  std::lock_guard<std::mutex> lock(mu_);
  on_signal_[sig] = status;
}

std::vector<int> FakeJob::signals() {
  std::lock_guard<std::mutex> lock(mu_);
  return signals_;
}

int FakeJob::kill_trees() {
  std::lock_guard<std::mutex> lock(mu_);
  return kill_trees_;
}

bool FakeJob::exited() {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_.has_value();
}

bool FakeJob::WaitSignal(int sig, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return std::find(signals_.begin(), signals_.end(), sig) != signals_.end();
  });
}

std::optional<ExitStatus> FakeJob::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_;
}

std::optional<ExitStatus> FakeJob::Wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto exited = [this] { return exit_.has_value(); };
  if (timeout_ms < 0) {
    cv_.wait(lock, exited);
  } else {
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), exited);
  }
  return exit_;
}

void FakeJob::Signal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  signals_.push_back(sig);
  if (auto it = on_signal_.find(sig); it != on_signal_.end()) ExitLocked(it->second);
  cv_.notify_all();
}

void FakeJob::KillTree() {
  std::lock_guard<std::mutex> lock(mu_);
  ++kill_trees_;
  ExitLocked(ExitStatus{0, SIGKILL});
  if (write_fd_ >= 0) {
    ::close(write_fd_);
    write_fd_ = -1;
  }
}

void FakeRuntime::FailNextStart(Status st) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_next_ = std::move(st);
}

std::shared_ptr<FakeJob> FakeRuntime::WaitStarted(size_t n, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return jobs_.size() > n; });
  return jobs_.size() > n ? jobs_[n] : nullptr;
}

size_t FakeRuntime::started() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

Result<std::unique_ptr<Process>> FakeRuntime::Start(const LaunchSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_next_) {
    Status st = *fail_next_;
    fail_next_.reset();
    return st;
  }
  auto job = std::make_shared<FakeJob>(spec);
  if (job->output_fd() < 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  jobs_.push_back(job);
  cv_.notify_all();
  return std::unique_ptr<Process>(new FakeProcess(std::move(job)));
}

}  // namespace tide::agent::testing
