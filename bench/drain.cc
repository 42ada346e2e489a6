// tide-drain: how fast a real server and agents turn over trivial jobs.
//
// It starts `tide server` and --agents agents of --gpus-per-agent fake GPUs
// each (the default sandbox runtime, or --runtime process) in a temp dir,
// and measures, --rounds times:
//
//   1. start latency: one one-GPU `true` at a time on the idle cluster, from
//      the server's created_at to the agent's "running" report;
//   2. a batch drain: --jobs one-GPU trials of `true` in one POST
//      /v1/batches (no max_concurrent), from the request to the last trial
//      ended: jobs/s, and the CPU each of the server and the agents spent
//      per job (their own time, not their children's: bwrap, the job), and
//      the whole machine's busy CPU per job (children, the kernel and this
//      program included);
//   3. one client process per job: --loop-jobs `tide submit` processes one
//      after another from this program (as a shell loop calling `tide
//      submit` would), then the drain of what they queued;
//   4. the start-up of one process, --startup-runs times each, wall time
//      from spawn to reaped: /bin/true, a plain C++ program (tide-hello,
//      beside this one), `tide --version`, and `tide submit` to the idle
//      server (the durable 201 included; the jobs wait on a held one, so no
//      agent works meanwhile).
//
// The last line is machine-readable (like the Slurm peer's), for
// bench/short_jobs.sh, which runs the peer in the same run. It fails (exit
// 1) when a figure measured nothing or a job did not complete.
//
//   tide-drain [--tide PATH] [--agents 4] [--gpus-per-agent 8] [--jobs 1000]
//              [--loop-jobs 200] [--latency-jobs 50] [--startup-runs 200]
//              [--runtime sandbox|process] [--rounds 1]
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "bench/processes.h"

using namespace tide;
using tide::bench::Percentile;
using tide::bench::Spawn;
using tide::bench::Stop;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string tide_bin;
  int agents = 4, gpus_per_agent = 8;
  int jobs = 1000, loop_jobs = 200, latency_jobs = 50, startup_runs = 200;
  std::string runtime = "sandbox";
  int rounds = 1;
};

struct Figures {
  double batch_jobs_per_s = 0;
  double loop_submit_per_s = 0, loop_drain_s = 0, loop_jobs_per_s = 0;
  double submit_p50_ms = 0, submit_p99_ms = 0;  // one `tide submit` process, wall
  double start_p50_ms = 0, start_p99_ms = 0;
  double server_cpu_ms = 0, agent_cpu_ms = 0, machine_cpu_ms = 0;  // per job of the batch
  // Start-up p50, wall: /bin/true, a plain C++ program, tide --version, tide
  // submit to the idle server.
  double true_ms = 0, cxx_ms = 0, version_ms = 0, idle_submit_ms = 0;
};

// Wall times (ms) of `runs` runs of argv, each spawned and reaped before the
// next; empty when one did not exit 0.
std::vector<double> TimeRuns(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int runs) {
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  std::vector<double> walls;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    pid_t pid = -1;
    int status = 0;
    if (posix_spawn(&pid, args[0], &quiet, nullptr, args.data(), envp.data()) != 0 ||
        waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "%s exited %d\n", argv[0].c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      walls.clear();
      break;
    }
    walls.push_back(1000 * std::chrono::duration<double>(Clock::now() - t0).count());
  }
  posix_spawn_file_actions_destroy(&quiet);
  return walls;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// utime + stime of `pid` itself, in seconds (children not counted).
double OwnCpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(text.substr(paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  // Fields after the name start at 3 (state); utime is 14, stime 15.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = atof(field.c_str());
    if (i == 15) stime = atof(field.c_str());
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// CPU seconds every core of the machine spent busy so far (/proc/stat).
double MachineBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Cluster {
  std::string dir, url, user_token;
  pid_t server = -1;
  std::vector<pid_t> agents;
  std::unique_ptr<api::Client> user;
};

// What the agents logged as they stopped ("agent CPU per attempt, by
// phase, over N attempts: prepare 0.4 ms, ..."), merged over the agents.
std::string AgentPhases(const Cluster& c, int agents) {
  std::vector<std::pair<std::string, double>> sum;  // phase -> ms x attempts
  long total_attempts = 0;
  for (int i = 0; i < agents; ++i) {
    std::ifstream log(c.dir + "/drain-" + std::to_string(i) + ".log");
    std::string line;
    const std::string marker = "by phase, over ";
    while (std::getline(log, line)) {
      size_t at = line.find(marker);
      if (at == std::string::npos) continue;
      std::istringstream in(line.substr(at + marker.size()));
      long n = 0;
      std::string word;
      in >> n >> word;  // "N attempts:"
      total_attempts += n;
      std::string name;
      double ms;
      size_t k = 0;
      while (in >> name >> ms >> word) {  // "prepare 0.400 ms,"
        if (k == sum.size()) sum.emplace_back(name, 0.0);
        sum[k++].second += ms * n;
      }
    }
  }
  if (total_attempts == 0) return "";
  std::string out;
  char buf[64];
  for (const auto& [name, ms] : sum) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f", out.empty() ? "" : ", ", name.c_str(),
                  ms / total_attempts);
    out += buf;
  }
  return out + " ms (" + std::to_string(total_attempts) + " attempts)";
}

void StopCluster(Cluster* c) {
  for (pid_t a : c->agents) Stop(a);
  Stop(c->server);
  if (std::string phases = AgentPhases(*c, static_cast<int>(c->agents.size())); !phases.empty()) {
    printf("agents' own CPU per attempt, by phase: %s\n", phases.c_str());
  }
  if (!getenv("TIDE_DRAIN_KEEP")) std::system(("rm -rf " + c->dir).c_str());
}

// A server and the agents, every GPU free; false when one did not start.
bool StartCluster(const Options& o, Cluster* c) {
  ::sync();  // the last run's files are not written back while this one measures
  char tmpl[] = "/tmp/tide-drain-XXXXXX";
  c->dir = mkdtemp(tmpl);
  ::chmod(c->dir.c_str(), 0711);  // sandboxed jobs run as uids of their own and traverse to their dirs
  std::string listen = "127.0.0.1:" + std::to_string(20000 + (getpid() + 3) % 20000);
  c->url = "http://" + listen;
  // The server's capacity is measured, not its per-token rate limit.
  c->server = Spawn({o.tide_bin, "server", "--listen", listen, "--data-dir", c->dir + "/server",
                     "--token-rate-limit", "off"},
                    c->dir + "/server.log");
  auto connect = [&](const std::string& token) {
    return std::move(api::Client::Create(c->url, token, api::TlsTrust{})).value();
  };
  auto admin_token = tide::bench::AwaitServer(*connect(""), c->dir + "/server", c->dir + "/server.log");
  if (!admin_token.ok()) {
    fprintf(stderr, "%s\n", admin_token.status().message().c_str());
    return false;
  }
  auto admin = connect(*admin_token);
  c->user_token = admin->CreateUser("drain")->token;
  c->user = connect(c->user_token);
  std::string join = admin->CreateJoinToken()->token;
  std::string gpus = std::to_string(o.gpus_per_agent) + "xRTX4090:24GB";
  for (int i = 0; i < o.agents; ++i) {
    std::string name = "drain-" + std::to_string(i);
    std::vector<std::string> argv = {o.tide_bin, "agent",        "--server",    c->url,
                                     "--join-token", join,       "--data-dir",  c->dir + "/" + name,
                                     "--name",       name,       "--fake-gpus", gpus,
                                     "--runtime",    o.runtime};
    if (o.runtime == "process") argv.push_back("--insecure-process-runtime");
    c->agents.push_back(Spawn(argv, c->dir + "/" + name + ".log"));
  }
  for (int i = 0; i < 400; ++i) {
    auto nodes = admin->ListNodes();
    if (nodes.ok() && static_cast<int>(nodes->size()) == o.agents) return true;
    usleep(50'000);
  }
  fprintf(stderr, "not every agent joined; see the agents' logs (TIDE_DRAIN_KEEP=1 keeps %s)\n",
          c->dir.c_str());
  return false;
}

// Waits until the user has no job left that has not ended; false after 10 min.
bool AwaitNoLiveJob(api::Client& client) {
  auto deadline = Clock::now() + std::chrono::minutes(10);
  while (Clock::now() < deadline) {
    auto page = client.Call("GET", "/v1/jobs?status=queued,starting,running&limit=1");
    if (page.ok() && (*page)["jobs"].empty()) return true;
    usleep(10'000);
  }
  return false;
}

// How many of the user's jobs ended other than completed (up to 1,000).
int CountNotCompleted(api::Client& client) {
  auto page = client.Call("GET", "/v1/jobs?status=failed,cancelled&limit=1000");
  return page.ok() ? static_cast<int>((*page)["jobs"].size()) : -1;
}

struct CpuSample {
  double server = 0, agents = 0, machine = 0;
};
CpuSample SampleCpu(const Cluster& c) {
  CpuSample s;
  s.server = OwnCpuSeconds(c.server);
  for (pid_t a : c.agents) s.agents += OwnCpuSeconds(a);
  s.machine = MachineBusySeconds();
  return s;
}

bool RunOnce(const Options& o, Figures* f) {
  Cluster c;
  if (!StartCluster(o, &c)) {
    StopCluster(&c);
    return false;
  }
  api::Client& client = *c.user;
  bool ok = true;

  // 1. Start latency on the idle cluster.
  std::vector<double> lat;
  const api::JobSpec one = std::move(api::JobSpecFromJson(
                                         {{"command", {"true"}}, {"resources", {{"gpu_count", 1}}}}))
                               .value();
  for (int i = 0; i < o.latency_jobs; ++i) {
    auto job = client.SubmitJob(one);
    if (!job.ok()) continue;
    api::Job j;
    for (int k = 0; k < 5000; ++k) {
      j = *client.GetJob(job->id);
      if (api::IsTerminal(j.status)) break;
      usleep(1'000);
    }
    if (j.started_at > 0) lat.push_back(static_cast<double>(j.started_at - j.created_at));
  }
  f->start_p50_ms = Percentile(lat, 50);
  f->start_p99_ms = Percentile(lat, 99);
  printf("start latency over %zu jobs: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", lat.size(),
         f->start_p50_ms, f->start_p99_ms, Percentile(lat, 100));
  if (o.latency_jobs > 0 && lat.empty()) {
    fprintf(stderr, "no job started: no latency measured\n");
    ok = false;
  }

  // 2. A batch of trivial trials in one request, drained.
  if (ok && o.jobs > 0) {
    nlohmann::json trials = nlohmann::json::array();
    for (int i = 0; i < o.jobs; ++i) trials.push_back({{"id", "t" + std::to_string(i)}});
    nlohmann::json file = {{"experiment_batch", "drain"},
                           {"template", {{"command", {"true"}}, {"resources", {{"gpu_count", 1}}}}},
                           {"jobs", trials}};
    CpuSample before = SampleCpu(c);
    auto t0 = Clock::now();
    auto batch = client.Call("POST", "/v1/batches", file, 300'000);
    double accepted = Seconds(t0);
    std::string status;
    if (!batch.ok()) {
      fprintf(stderr, "batch refused: %s\n", batch.status().ToString().c_str());
      ok = false;
    } else {
      const std::string id = (*batch)["id"];
      auto deadline = Clock::now() + std::chrono::minutes(10);
      while (Clock::now() < deadline) {
        auto b = client.Call("GET", "/v1/batches/" + id);
        if (b.ok()) status = (*b)["status"];
        if (status == "completed" || status == "failed" || status == "cancelled") break;
        usleep(25'000);  // the poll costs the server little beside the jobs
      }
    }
    double secs = Seconds(t0);
    CpuSample after = SampleCpu(c);
    if (ok && status != "completed") {
      fprintf(stderr, "the batch ended %s, not completed (TIDE_DRAIN_KEEP=1 keeps %s)\n",
              status.empty() ? "nowhere in 10 minutes" : status.c_str(), c.dir.c_str());
      ok = false;
    }
    if (ok) {
      f->batch_jobs_per_s = o.jobs / secs;
      f->server_cpu_ms = 1000 * (after.server - before.server) / o.jobs;
      f->agent_cpu_ms = 1000 * (after.agents - before.agents) / o.jobs;
      f->machine_cpu_ms = 1000 * (after.machine - before.machine) / o.jobs;
      printf("batch of %d trials of `true` (one request, accepted in %.3f s): drained in %.2f s = "
             "%.1f jobs/s; CPU per job: server %.2f ms, agents %.2f ms (own time), machine %.1f ms\n",
             o.jobs, accepted, secs, f->batch_jobs_per_s, f->server_cpu_ms, f->agent_cpu_ms,
             f->machine_cpu_ms);
    }
  }

  // 3. One `tide submit` process per job, one after another.
  if (ok && o.loop_jobs > 0) {
    std::string env_server = "TIDE_SERVER=" + c.url, env_token = "TIDE_TOKEN=" + c.user_token;
    int failed = 0;
    std::vector<double> walls;  // ms per process, fork to reaped
    auto t0 = Clock::now();
    fflush(stdout);  // else each child writes what is buffered again
    for (int i = 0; i < o.loop_jobs; ++i) {
      auto p0 = Clock::now();
      pid_t pid = fork();
      if (pid == 0) {
        std::vector<char*> env = {env_server.data(), env_token.data(), nullptr};
        const char* argv[] = {o.tide_bin.c_str(), "submit", "-q", "--gpus", "1", "--", "true", nullptr};
        freopen("/dev/null", "w", stdout);
        execve(argv[0], const_cast<char**>(argv), env.data());
        _exit(127);
      }
      int wstatus = 0;
      waitpid(pid, &wstatus, 0);
      walls.push_back(1000 * Seconds(p0));
      if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) failed++;
    }
    f->submit_p50_ms = Percentile(walls, 50);
    f->submit_p99_ms = Percentile(walls, 99);
    double submit_s = Seconds(t0);
    auto t1 = Clock::now();
    bool drained = AwaitNoLiveJob(client);
    f->loop_drain_s = Seconds(t1);
    double total_s = Seconds(t0);
    f->loop_submit_per_s = o.loop_jobs / submit_s;
    f->loop_jobs_per_s = o.loop_jobs / total_s;
    printf("%d `tide submit` processes one after another: submitted in %.2f s = %.1f/s (%d failed), "
           "drained %.2f s later: %.1f jobs/s; one `tide submit` (start to exit, the 201 "
           "included): p50 %.1f ms, p99 %.1f ms\n",
           o.loop_jobs, submit_s, f->loop_submit_per_s, failed, f->loop_drain_s, f->loop_jobs_per_s,
           f->submit_p50_ms, f->submit_p99_ms);
    if (failed > 0 || !drained) {
      fprintf(stderr, "%s\n", failed > 0 ? "a `tide submit` failed" : "the jobs did not drain");
      ok = false;
    }
  }

  int bad = ok ? CountNotCompleted(client) : 0;
  if (bad != 0) {
    fprintf(stderr, "%d jobs ended other than completed (TIDE_DRAIN_KEEP=1 keeps %s)\n", bad,
            c.dir.c_str());
    ok = false;
  }

  // 4. The start-up of one process. The submitted jobs wait on a job that
  // sleeps, so no agent runs anything while the next process starts.
  if (ok && o.startup_runs > 0) {
    const api::JobSpec holder = std::move(api::JobSpecFromJson(
        {{"command", {"sleep", "600"}}, {"resources", {{"gpu_count", 1}}}})).value();
    auto held = client.SubmitJob(holder);
    const std::string hello = tide::bench::ThisProgramsDir() + "/tide-hello";
    const std::vector<std::string> env = {"TIDE_SERVER=" + c.url, "TIDE_TOKEN=" + c.user_token,
                                          "PATH=/usr/bin:/bin"};
    struct Case {
      const char* what;
      std::vector<std::string> argv;
      double* p50;
    };
    std::vector<Case> cases = {
        {"/bin/true", {"/bin/true"}, &f->true_ms},
        {"a plain C++ program (tide-hello)", {hello}, &f->cxx_ms},
        {"tide --version", {o.tide_bin, "--version"}, &f->version_ms},
        {"tide submit to the idle server (durable 201)",
         {o.tide_bin, "submit", "-q", "--gpus", "1", "--depends-on", held.ok() ? held->id : "",
          "--", "true"},
         &f->idle_submit_ms}};
    for (Case& k : cases) {
      std::vector<double> walls = held.ok() ? TimeRuns(k.argv, env, o.startup_runs)
                                            : std::vector<double>{};
      if (walls.empty()) {
        fprintf(stderr, "start-up of %s: nothing measured%s\n", k.what,
                held.ok() ? "" : (": " + held.status().ToString()).c_str());
        ok = false;
        break;
      }
      *k.p50 = Percentile(walls, 50);
      printf("start-up, %d runs, spawn to reaped: %s p50 %.2f ms, p99 %.2f ms\n", o.startup_runs,
             k.what, *k.p50, Percentile(walls, 99));
    }
    if (held.ok()) (void)client.CancelJob(held->id);  // its dependants end with it
    if (ok && !AwaitNoLiveJob(client)) {
      fprintf(stderr, "the held jobs did not end after their holder's cancel\n");
      ok = false;
    }
  }
  StopCluster(&c);
  return ok;
}

const char kUsage[] =
    "usage: tide-drain [--tide PATH] [--agents 4] [--gpus-per-agent 8] [--jobs 1000]\n"
    "                  [--loop-jobs 200] [--latency-jobs 50] [--startup-runs 200]\n"
    "                  [--runtime sandbox|process] [--rounds 1]\n"
    "Starts a tide server and agents with fake GPUs on loopback and prints start\n"
    "latency, the drain of --jobs trivial trials submitted in one batch (with the\n"
    "server's and agents' CPU per job), and --loop-jobs `tide submit` processes run\n"
    "one after another, and the start-up of one process (/bin/true, a plain C++\n"
    "program, tide --version, tide submit). With --rounds N the last line has the\n"
    "medians.\n";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int parsed = tide::bench::ParseFlags(argc, argv, kUsage, [&](const std::string& a,
                                                                      const std::string& v) {
    if (a == "--tide") o.tide_bin = v;
    else if (a == "--agents") o.agents = atoi(v.c_str());
    else if (a == "--gpus-per-agent") o.gpus_per_agent = atoi(v.c_str());
    else if (a == "--jobs") o.jobs = atoi(v.c_str());
    else if (a == "--loop-jobs") o.loop_jobs = atoi(v.c_str());
    else if (a == "--latency-jobs") o.latency_jobs = atoi(v.c_str());
    else if (a == "--startup-runs") o.startup_runs = atoi(v.c_str());
    else if (a == "--rounds") o.rounds = atoi(v.c_str());
    else if (a == "--runtime" && (v == "sandbox" || v == "process")) o.runtime = v;
    else return false;
    return true;
  });
  if (parsed >= 0) return parsed;
  if (o.agents < 1 || o.gpus_per_agent < 1 || o.jobs < 0 || o.jobs > 20'000 || o.loop_jobs < 0 ||
      o.latency_jobs < 0 || o.startup_runs < 0 || o.rounds < 1 ||
      o.jobs + o.loop_jobs + o.latency_jobs + o.startup_runs == 0) {
    fprintf(stderr, "--agents, --gpus-per-agent and --rounds must be at least 1, --jobs 0-20000, "
                    "--loop-jobs, --latency-jobs and --startup-runs at least 0, and something must "
                    "run\n");
    return 2;
  }
  if (o.tide_bin.empty()) o.tide_bin = tide::bench::DefaultTideBinary();
  std::vector<Figures> all;
  for (int round = 0; round < o.rounds; ++round) {
    Figures f;
    if (!RunOnce(o, &f)) return 1;
    all.push_back(f);
  }
  using tide::bench::Median;
  printf("tide runtime=%s N=%d loop_N=%d nodes=%d gpus=%d batch_jobs_per_s=%.1f "
         "loop_submit_per_s=%.1f loop_drain_s=%.2f loop_jobs_per_s=%.1f submit_p50_ms=%.1f "
         "submit_p99_ms=%.1f start_p50_ms=%.1f start_p99_ms=%.1f server_cpu_ms_per_job=%.2f "
         "agent_cpu_ms_per_job=%.2f machine_cpu_ms_per_job=%.1f true_ms=%.2f cxx_ms=%.2f "
         "version_ms=%.2f idle_submit_ms=%.2f rounds=%d\n",
         o.runtime.c_str(), o.jobs, o.loop_jobs, o.agents, o.agents * o.gpus_per_agent,
         Median(all, &Figures::batch_jobs_per_s), Median(all, &Figures::loop_submit_per_s),
         Median(all, &Figures::loop_drain_s), Median(all, &Figures::loop_jobs_per_s),
         Median(all, &Figures::submit_p50_ms), Median(all, &Figures::submit_p99_ms),
         Median(all, &Figures::start_p50_ms), Median(all, &Figures::start_p99_ms),
         Median(all, &Figures::server_cpu_ms), Median(all, &Figures::agent_cpu_ms),
         Median(all, &Figures::machine_cpu_ms), Median(all, &Figures::true_ms),
         Median(all, &Figures::cxx_ms), Median(all, &Figures::version_ms),
         Median(all, &Figures::idle_submit_ms), o.rounds);
  return 0;
}
