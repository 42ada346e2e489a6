// tide-load: measures a real server and agent on this machine.
//
//   1. durable submissions per second: C connections, each POSTs jobs one per
//      request and waits for the 201 (which means the job is in the store);
//   2. submit-to-running latency on an idle cluster: one job at a time, from
//      the server's created_at to the agent's "running" report (started_at);
//   3. one batch of N trials (a 100 x N/100 grid, max_concurrent 8): the time
//      to its 201 (every trial durable) and to list every trial, then to
//      cancel it.
//
// It starts `tide server` and one `tide agent` (fake GPUs) in a temp dir,
// prints its figures and stops both by pid.
//
//   tide-load [--tide PATH] [--connections 8] [--jobs 4000] [--latency-jobs 50]
//             [--priced on|off] [--batch-trials 10000]
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "common/paths.h"

using namespace tide;
using Clock = std::chrono::steady_clock;

namespace {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(1, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void Stop(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(50'000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tide_bin;
  int connections = 8, jobs = 4000, latency_jobs = 50, batch_trials = 10'000;
  bool priced = false;  // --priced on: every submission holds escrow in the ledger
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tide") tide_bin = argv[i + 1];
    else if (a == "--connections") connections = atoi(argv[i + 1]);
    else if (a == "--jobs") jobs = atoi(argv[i + 1]);
    else if (a == "--latency-jobs") latency_jobs = atoi(argv[i + 1]);
    else if (a == "--batch-trials") batch_trials = atoi(argv[i + 1]);
    else if (a == "--priced") priced = std::string(argv[i + 1]) == "on";
    else {
      fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (tide_bin.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    std::string dir = self;
    dir = dir.substr(0, dir.rfind('/'));
    tide_bin = dir + "/../tide";
  }
  char tmpl[] = "/tmp/tide-load-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  ::chmod(dir.c_str(), 0711);  // sandboxed jobs run as uids of their own and traverse to their dirs
  std::string listen = "127.0.0.1:" + std::to_string(20000 + getpid() % 20000);
  std::string url = "http://" + listen;
  pid_t server = Spawn({tide_bin, "server", "--listen", listen, "--data-dir", dir + "/server"},
                       dir + "/server.log");
  auto probe = std::move(api::Client::Create(url, "")).value();
  for (int i = 0; i < 200 && !probe->Health().ok(); ++i) usleep(50'000);
  auto admin_token = ReadFile(dir + "/server/admin.token");
  if (!admin_token.ok()) {
    fprintf(stderr, "server did not start; see %s/server.log\n", dir.c_str());
    Stop(server);
    return 1;
  }
  std::string tok = *admin_token;
  tok.erase(tok.find_last_not_of("\n") + 1);
  auto admin = std::move(api::Client::Create(url, tok)).value();
  std::string user = admin->CreateUser("load")->token;
  if (priced) {
    // H100 at 2 credits per GPU-hour, and plenty of credit: each submission
    // of the throughput run holds 2 credits (1 GPU x max_runtime 1h).
    (void)admin->Call("POST", "/v1/admin/prices", nlohmann::json{{"per_gpu_hour", {{"H100", "2"}}}});
    auto card = admin->Call("POST", "/v1/admin/cards", nlohmann::json{{"count", 1}, {"value", "1000000"}});
    auto user_client = std::move(api::Client::Create(url, user)).value();
    if (!card.ok() ||
        !user_client->Call("POST", "/v1/cards/redeem", nlohmann::json{{"code", (*card)["codes"][0]}}).ok()) {
      fprintf(stderr, "could not fund the load user\n");
      return 1;
    }
  }
  std::string join = admin->CreateJoinToken()->token;
  pid_t agent = Spawn({tide_bin, "agent", "--server", url, "--join-token", join, "--data-dir",
                       dir + "/agent", "--name", "load-agent", "--fake-gpus", "8xRTX4090:24GB"},
                      dir + "/agent.log");
  bool joined = false;
  for (int i = 0; i < 200 && !joined; ++i) {
    auto nodes = admin->ListNodes();
    joined = nodes.ok() && !nodes->empty();
    if (!joined) usleep(50'000);
  }
  if (!joined) {
    fprintf(stderr, "the agent did not join; see %s/agent.log\n", dir.c_str());
    Stop(agent);
    Stop(server);
    return 1;
  }

  // 1. Throughput: jobs that wait (no node has their GPU type), so the
  // figure is the API and the store, not the agent.
  std::atomic<int> next{0}, failed{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&] {
      auto client = std::move(api::Client::Create(url, user)).value();
      nlohmann::json spec = {{"name", "load"},
                             {"command", {"true"}},
                             {"resources", {{"gpu_type", "H100"}, {"gpu_count", 1}}}};
      if (priced) spec["max_runtime"] = "1h";
      const api::JobSpec typed = std::move(api::JobSpecFromJson(spec)).value();
      while (next.fetch_add(1) < jobs) {
        if (!client->SubmitJob(typed).ok()) failed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  printf("durable submissions%s: %d jobs over %d connections in %.2f s = %.0f jobs/s (%d failed)\n",
         priced ? " (priced: each holds escrow)" : "", jobs, connections, secs, jobs / secs,
         failed.load());

  // Clear the waiting jobs so the latency run sees an idle cluster.
  auto client = std::move(api::Client::Create(url, user)).value();
  while (true) {
    api::JobFilter f;
    f.status = "queued";
    f.limit = 1000;
    auto page = client->ListJobs(f);
    if (!page.ok() || page->jobs.empty()) break;
    for (auto& j : page->jobs) (void)client->CancelJob(j.id);
  }

  // 2. Latency: one job at a time on an idle 8-GPU node.
  std::vector<double> lat;
  for (int i = 0; i < latency_jobs; ++i) {
    auto job = client->SubmitJob(
        std::move(api::JobSpecFromJson({{"command", {"true"}}, {"resources", {{"gpu_count", 1}}}}))
            .value());
    if (!job.ok()) continue;
    api::Job j;
    for (int k = 0; k < 2000; ++k) {
      j = *client->GetJob(job->id);
      if (api::IsTerminal(j.status)) break;
      usleep(2'000);
    }
    if (j.started_at > 0) lat.push_back(static_cast<double>(j.started_at - j.created_at));
  }
  printf("submit-to-running latency over %zu jobs: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
         lat.size(), Percentile(lat, 50), Percentile(lat, 99), Percentile(lat, 100));
  // 3. One batch, one request.
  if (batch_trials >= 100) {
    nlohmann::json grid = {{"a", nlohmann::json::array()}, {"b", nlohmann::json::array()}};
    for (int i = 0; i < 100; ++i) grid["a"].push_back(i);
    for (int i = 0; i < batch_trials / 100; ++i) grid["b"].push_back(i);
    nlohmann::json file = {{"experiment_batch", "load"},
                           {"max_concurrent", 8},
                           {"template", {{"command", "sleep 1 # {a} {b}"},
                                         {"resources", {{"gpu_count", 1}}},
                                         {"max_runtime", "1m"}}},
                           {"grid", grid}};
    auto b0 = Clock::now();
    auto batch = client->Call("POST", "/v1/batches", file, 300'000);
    double accept = std::chrono::duration<double>(Clock::now() - b0).count();
    if (!batch.ok()) {
      fprintf(stderr, "batch refused: %s\n", batch.status().ToString().c_str());
    } else {
      const std::string id = (*batch)["id"];
      size_t listed = 0;
      std::string after;
      while (true) {
        auto page = client->Call("GET", "/v1/jobs?batch=" + id + "&limit=1000" +
                                            (after.empty() ? "" : "&after=" + after));
        if (!page.ok()) break;
        listed += (*page)["jobs"].size();
        after = (*page)["next"];
        if (after.empty()) break;
      }
      double visible = std::chrono::duration<double>(Clock::now() - b0).count();
      auto c0 = Clock::now();
      auto cancelled = client->Call("POST", "/v1/batches/" + id + "/cancel", nlohmann::json::object(), 300'000);
      double cancel = std::chrono::duration<double>(Clock::now() - c0).count();
      printf("one batch of %d trials: accepted (durable) in %.2f s, %zu trials listed after %.2f s, "
             "cancelled in %.2f s%s\n",
             (*batch)["trials"].get<int>(), accept, listed, visible, cancel,
             cancelled.ok() ? "" : " (cancel failed)");
    }
  }
  Stop(agent);
  Stop(server);
  if (!getenv("TIDE_LOAD_KEEP")) std::system(("rm -rf " + dir).c_str());
  return failed.load() == 0 ? 0 : 1;
}
