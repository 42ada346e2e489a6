// tide-runtime-bench: what a job pays for its isolation. For each runtime of
// the agent, the time from Start to the exit of `true` (a job's start and
// teardown) and the time a cancel takes (KillTree of a running job with
// children, until it is reaped):
//   process         plain processes, no cgroup (development only)
//   process+cgroup  the same in a job cgroup with limits
//   sandbox         bubblewrap as a job uid, in a job cgroup (the default)
//   oci             a runc container over a busybox rootfs, in a job cgroup
// and, for the sandbox's floor, what its parts cost by themselves, with no
// agent code around them:
//   floor/true_as_uid       fork and exec of `true` as a job uid
//   floor/user_ns           the same in a user namespace of its own
//   floor/namespaces_host_net  in bwrap's namespaces but the network (user,
//                           pid, mount, ipc, uts, cgroup), without its mounts
//   floor/namespaces        in all of bwrap's namespaces, without its mounts
//   floor/bwrap             bwrap with the sandbox's arguments running `true`
//   floor/bwrap_no_seccomp  the same without the seccomp filter
//   floor/bwrap_host_net    the same sharing the host's network (no new net
//                           namespace)
//   floor/cgroup            a job cgroup made with limits and removed
// Each reports child_cpu_ms, the CPU its child processes (bwrap, the job)
// used per iteration, beside the benchmark's own CPU column, and
// machine_cpu_ms, the whole machine's busy CPU per iteration (this program,
// its children and the kernel's own threads, which tear namespaces down).
// Needs root (job uids, cgroups); a runtime this host cannot give is
// reported as skipped with the reason.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "agent/runtime/cgroup.h"
#include "agent/runtime/oci.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/sandbox.h"
#include "agent/testing/busybox_image.h"
#include "agent/testing/job_spec.h"

namespace fs = std::filesystem;
using namespace tide::agent;

namespace {

enum class Kind { kProcess, kProcessCgroup, kSandbox, kOci };

struct Env {
  std::string dir, data;
  std::unique_ptr<ProcessRuntime> plain, limited;
  std::unique_ptr<CgroupManager> cgroups;
  std::unique_ptr<SandboxRuntime> sandbox;
  std::unique_ptr<OciRuntime> oci;
  std::string cgroup_error, sandbox_error, oci_error;
  int devnull = -1;
  int seq = 0;

  Env() {
    char tmpl[] = "/tmp/tide-runtime-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir = tmpl;
    ::chmod(dir.c_str(), 0711);  // job uids traverse to their directories
    data = dir + "/data";
    fs::create_directories(data + "/jobs");
    devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    plain = std::make_unique<ProcessRuntime>();
    limited = std::make_unique<ProcessRuntime>();
    auto layout = DetectCgroups();
    if (!layout.ok()) {
      cgroup_error = layout.status().message();
    } else if (auto m = CgroupManager::Create(*layout, "tide-bench-" + std::to_string(::getpid()));
               !m.ok()) {
      cgroup_error = m.status().message();
    } else {
      cgroups = std::move(m).value();
      limited->set_cgroups(cgroups.get());
    }
    SandboxOptions so;
    so.uids = {2100000200u, 2100000299u};
    so.lock_dir = dir + "/locks";
    so.hidden = {data};
    if (auto rt = SandboxRuntime::Create(so, limited.get()); rt.ok()) {
      sandbox = std::move(rt).value();
    } else {
      sandbox_error = rt.status().message();
    }
    OciOptions oo;
    oo.init = TIDE_INIT_BINARY;
    oo.state_dir = data + "/oci";
    oo.uids = {2100000300u, 2100000399u};
    oo.lock_dir = dir + "/locks";
    if (!testing::MakeBusyboxImage(dir + "/busybox")) {
      oci_error = "no static busybox (Debian package busybox-static)";
    } else {
      oo.images = {{"busybox", dir + "/busybox"}};
      if (auto rt = OciRuntime::Create(oo, limited.get(), cgroups.get()); rt.ok()) {
        oci = std::move(rt).value();
      } else {
        oci_error = rt.status().message();
      }
    }
  }
  ~Env() {
    oci.reset();
    sandbox.reset();
    limited.reset();
    plain.reset();
    cgroups.reset();
    if (devnull >= 0) ::close(devnull);
    if (!dir.empty()) fs::remove_all(dir);
  }

  // The runtime of `kind`, or null with the reason in *why.
  Runtime* Get(Kind kind, std::string* why) const {
    switch (kind) {
      case Kind::kProcess:
        return plain.get();
      case Kind::kProcessCgroup:
        *why = "no job cgroups: " + cgroup_error;
        return cgroups ? limited.get() : nullptr;
      case Kind::kSandbox:
        *why = sandbox_error;
        return sandbox.get();
      case Kind::kOci:
        *why = oci_error;
        return oci.get();
    }
    return nullptr;
  }

  // A job's directories and spec, as the agent lays them out.
  LaunchSpec Job(Kind kind, const std::string& script, int output_fd) {
    LaunchSpec spec = testing::JobSpec(data, "j-bench-" + std::to_string(++seq), script);
    spec.output_fd = output_fd;
    spec.limits = {1LL << 30, 1.0, 256};
    if (kind == Kind::kOci) spec.image = "busybox";
    return spec;
  }
  void Remove(const LaunchSpec& spec) {
    fs::remove_all(fs::path(spec.work_dir).parent_path().parent_path());
  }
};

Env* env = nullptr;

double ChildrenCpuMs() {
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

// CPU every core of the machine spent busy so far (/proc/stat), in ms.
double MachineBusyMs() {
  FILE* f = ::fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system,
                        &idle, &iowait, &irq, &softirq, &steal);
  ::fclose(f);
  if (got != 8) return 0;
  return 1e3 * static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct CpuSince {
  double children = ChildrenCpuMs();
  double machine = MachineBusyMs();
};

// Sets child_cpu_ms and machine_cpu_ms: per iteration since `since`.
void ReportCpu(benchmark::State& state, const CpuSince& since) {
  if (state.iterations() > 0) {
    const auto n = static_cast<double>(state.iterations());
    state.counters["child_cpu_ms"] = (ChildrenCpuMs() - since.children) / n;
    state.counters["machine_cpu_ms"] = (MachineBusyMs() - since.machine) / n;
  }
}

// The runtime of `kind`, or null once `state` is skipped with the reason.
Runtime* RuntimeOrSkip(benchmark::State& state, Kind kind) {
  std::string why;
  Runtime* rt = env->Get(kind, &why);
  if (rt == nullptr) state.SkipWithError(why.c_str());
  return rt;
}

void BM_StartToExit(benchmark::State& state, Kind kind) {
  Runtime* rt = RuntimeOrSkip(state, kind);
  if (rt == nullptr) return;
  const CpuSince since;
  for (auto _ : state) {
    state.PauseTiming();
    LaunchSpec spec = env->Job(kind, "true", env->devnull);
    state.ResumeTiming();
    auto p = rt->Start(spec);
    if (!p.ok()) {
      state.SkipWithError(p.status().ToString().c_str());
      break;
    }
    auto e = (*p)->Wait(30'000);
    p->reset();  // the runtime's teardown: cgroup, uid claim, container
    state.PauseTiming();
    if (!e || e->exit_code != 0) {
      state.SkipWithError("the job did not exit 0");
      break;
    }
    env->Remove(spec);
    state.ResumeTiming();
  }
  ReportCpu(state, since);
}

// Reads the job's output until `word` appears (false after 30 s).
bool WaitForOutput(int fd, const std::string& word) {
  std::string got;
  for (int i = 0; i < 600 && got.find(word) == std::string::npos; ++i) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return got.find(word) != std::string::npos;
}

void BM_Cancel(benchmark::State& state, Kind kind) {
  Runtime* rt = RuntimeOrSkip(state, kind);
  if (rt == nullptr) return;
  for (auto _ : state) {
    state.PauseTiming();
    LaunchSpec spec = env->Job(kind, "sleep 60 & sleep 60 & echo ready; wait", -1);
    auto p = rt->Start(spec);
    if (!p.ok() || !WaitForOutput((*p)->output_fd(), "ready")) {
      state.SkipWithError(p.ok() ? "the job never said ready" : p.status().ToString().c_str());
      break;
    }
    state.ResumeTiming();
    tide::Status killed = (*p)->KillTree();
    auto e = (*p)->Wait(30'000);
    p->reset();
    state.PauseTiming();
    if (!killed.ok() || !e) {
      state.SkipWithError(killed.ok() ? "the job was not reaped" : killed.ToString().c_str());
      break;
    }
    env->Remove(spec);
    state.ResumeTiming();
  }
}

enum class Floor {
  kTrueAsUid,
  kUserNs,             // a user namespace, nothing else
  kNamespacesHostNet,  // bwrap's namespaces but the network: user, pid, mount, ipc, uts, cgroup
  kNamespaces,         // all of bwrap's namespaces, without its mounts
  kBwrap,
  kBwrapNoSeccomp,
  kBwrapHostNet,
};

int UnshareFlags(Floor floor) {
  constexpr int kAllButNet =
      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  switch (floor) {
    case Floor::kUserNs: return CLONE_NEWUSER;
    case Floor::kNamespacesHostNet: return kAllButNet;
    case Floor::kNamespaces: return kAllButNet | CLONE_NEWNET;
    default: return 0;
  }
}

// Runs argv as `uid` (fork: this process is small and has one thread) and
// waits for it; false unless it exits 0. `keep_fd` stays open across exec.
// With `unshare_flags`, the uid makes those namespaces first (as bwrap does,
// unprivileged) and argv runs as the first process of them.
bool RunAs(uid_t uid, const std::vector<std::string>& argv, int keep_fd, int unshare_flags = 0) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin";
  char* envp[] = {path_env, nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(env->devnull, 1);
    ::dup2(env->devnull, 2);
    if (keep_fd >= 0) ::fcntl(keep_fd, F_SETFD, 0);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      ::_exit(126);
    }
    if (unshare_flags != 0) {
      if (::unshare(unshare_flags) != 0) ::_exit(125);
      pid_t first = ::fork();  // pid 1 of the new pid namespace
      if (first == 0) {
        ::execve(args[0], args.data(), envp);
        ::_exit(127);
      }
      int st = 0;
      ::_exit(first > 0 && ::waitpid(first, &st, 0) == first && WIFEXITED(st) ? WEXITSTATUS(st)
                                                                              : 124);
    }
    ::execve(args[0], args.data(), envp);
    ::_exit(127);
  }
  int status = 0;
  return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

void BM_Floor(benchmark::State& state, Floor floor) {
  if (floor >= Floor::kBwrap && !env->sandbox) {
    state.SkipWithError(env->sandbox_error.c_str());
    return;
  }
  const uid_t uid = 2100000400u;
  auto filter = JobSeccompFilter();
  if (!filter.ok()) {
    state.SkipWithError(filter.status().ToString().c_str());
    return;
  }
  const CpuSince since;
  for (auto _ : state) {
    state.PauseTiming();
    LaunchSpec spec = env->Job(Kind::kSandbox, "true", env->devnull);
    for (const std::string& p : spec.writable) (void)GiveTree(p, uid);
    std::vector<std::string> argv = {"/usr/bin/true"};
    int filter_fd = -1;
    if (floor >= Floor::kBwrap) {
      SandboxPlan plan;
      plan.uid = uid;
      plan.work_dir = spec.work_dir;
      plan.writable = spec.writable;
      plan.readable = spec.readable;
      plan.hidden = {env->data};
      plan.network = floor == Floor::kBwrapHostNet;
      plan.hostname = "bench";
      plan.command = {"true"};
      if (floor != Floor::kBwrapNoSeccomp) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0 ||
            ::write(fds[1], filter->data(), filter->size()) != static_cast<ssize_t>(filter->size())) {
          state.SkipWithError("seccomp pipe");
          break;
        }
        ::close(fds[1]);
        filter_fd = plan.seccomp_fd = fds[0];
      }
      argv = {env->sandbox->options().bwrap};
      for (std::string& a : BwrapArgs(plan)) argv.push_back(std::move(a));
    }
    state.ResumeTiming();
    bool ok = RunAs(uid, argv, filter_fd, UnshareFlags(floor));
    state.PauseTiming();
    if (filter_fd >= 0) ::close(filter_fd);
    env->Remove(spec);
    if (!ok) {
      state.SkipWithError("the command did not exit 0");
      break;
    }
    state.ResumeTiming();
  }
  ReportCpu(state, since);
}

void BM_FloorCgroup(benchmark::State& state) {
  if (!env->cgroups) {
    state.SkipWithError(("no job cgroups: " + env->cgroup_error).c_str());
    return;
  }
  const CpuSince since;
  for (auto _ : state) {
    auto cg = env->cgroups->CreateJob("floor-" + std::to_string(++env->seq), {1LL << 30, 1.0, 256});
    if (!cg.ok()) {
      state.SkipWithError(cg.status().ToString().c_str());
      break;
    }
  }
  ReportCpu(state, since);
}

#define TIDE_RUNTIME_BENCH(fn)                                                       \
  BENCHMARK_CAPTURE(fn, process, Kind::kProcess)->Unit(benchmark::kMillisecond);     \
  BENCHMARK_CAPTURE(fn, process_cgroup, Kind::kProcessCgroup)                        \
      ->Unit(benchmark::kMillisecond);                                               \
  BENCHMARK_CAPTURE(fn, sandbox, Kind::kSandbox)->Unit(benchmark::kMillisecond);     \
  BENCHMARK_CAPTURE(fn, oci, Kind::kOci)->Unit(benchmark::kMillisecond)

TIDE_RUNTIME_BENCH(BM_StartToExit);
TIDE_RUNTIME_BENCH(BM_Cancel);
// After the runtimes: thousands of net namespaces are torn down by the
// kernel in the background for a while after these.
BENCHMARK_CAPTURE(BM_Floor, true_as_uid, Floor::kTrueAsUid)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, user_ns, Floor::kUserNs)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, namespaces_host_net, Floor::kNamespacesHostNet)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, namespaces, Floor::kNamespaces)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, bwrap, Floor::kBwrap)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, bwrap_no_seccomp, Floor::kBwrapNoSeccomp)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Floor, bwrap_host_net, Floor::kBwrapHostNet)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FloorCgroup)->Name("BM_Floor/cgroup")->Unit(benchmark::kMillisecond);


}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (::geteuid() != 0) {
    fprintf(stderr, "tide-runtime-bench: run as root (jobs run as their own uids, in cgroups)\n");
    return 1;
  }
  env = new Env;
  if (env->dir.empty()) {
    fprintf(stderr, "tide-runtime-bench: cannot create a directory in /tmp\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  delete env;
  return 0;
}
