#include "agent/job_cpu.h"

#include <time.h>

#include <atomic>
#include <cstdio>

namespace tide::agent {
namespace {

constexpr const char* kNames[] = {"other",  "threads", "prepare", "uid",    "hand-over",
                                  "cgroup", "spawn",   "watch",   "kill",   "report",
                                  "logs",   "outputs", "wipe"};
static_assert(sizeof kNames / sizeof kNames[0] == static_cast<int>(JobPhase::kCount));

std::atomic<int64_t> g_ns[static_cast<int>(JobPhase::kCount)];
std::atomic<int64_t> g_attempts{0};

thread_local JobPhase t_phase = JobPhase::kOther;
thread_local int64_t t_since = -1;  // thread CPU ns when t_phase began; -1: not started

int64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Charges the running phase up to now and starts `next`.
void Switch(JobPhase next) {
  const int64_t now = ThreadCpuNs();
  if (t_since >= 0) {
    g_ns[static_cast<int>(t_phase)].fetch_add(now - t_since, std::memory_order_relaxed);
  }
  t_phase = next;
  t_since = now;
}

}  // namespace

CpuPhase::CpuPhase(JobPhase phase) : outer_(t_phase) { Switch(phase); }

CpuPhase::~CpuPhase() { Switch(outer_); }

void EndCpuThread() {
  Switch(JobPhase::kOther);
  t_since = -1;
}

void CountAttempt() { g_attempts.fetch_add(1, std::memory_order_relaxed); }

std::string CpuPerAttempt() {
  const int64_t n = g_attempts.load();
  if (n == 0) return "";
  std::string out = "over " + std::to_string(n) + " attempts:";
  int64_t total = 0;
  char buf[64];
  for (int i = 0; i < static_cast<int>(JobPhase::kCount); ++i) {
    const int64_t ns = g_ns[i].load();
    total += ns;
    std::snprintf(buf, sizeof buf, " %s %.3f ms,", kNames[i], static_cast<double>(ns) / n / 1e6);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, " total %.3f ms", static_cast<double>(total) / n / 1e6);
  return out + buf;
}

}  // namespace tide::agent
