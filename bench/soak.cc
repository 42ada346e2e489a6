// tide-soak: a fault soak. It runs a server (SQLite) and several agents on
// loopback, keeps them busy — submissions, cancels, batches, card
// redemptions, jobs that run — and meanwhile kills the server or a random
// agent with SIGKILL every few seconds and starts it again on the same data
// dir. At the end it lets the cluster settle and checks:
//
//   - every acknowledged job (a 201) and batch exists, and its job reached
//     a terminal state or is still queued;
//   - no job ran two attempts at once: each job's command writes a line to
//     a trace file five times a second, and no two attempts of one job
//     wrote within the same span of time;
//   - the ledger balances (GET /v1/admin/ledger/check) and no account is
//     negative;
//   - no token (user, admin, join, node) and no job's secret appears in any
//     log: the server's, the agents', or a job's own as the server stored
//     it (each job prints its secret, which the agent masks).
//
// It prints the counts (operations, kills, jobs, failures found) and exits
// 1 when a check failed or when it measured nothing. Bounded by --seconds;
// every process it started is stopped by pid.
//
//   tide-soak [--tide PATH] [--seconds 120] [--agents 3] [--kill-every 8] [--seed N]
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "bench/processes.h"
#include "common/paths.h"

using namespace tide;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

struct Options {
  std::string tide_bin;
  int seconds = 120;
  int agents = 3;
  int kill_every_s = 8;
  unsigned seed = 0;
};

// One process the soak restarts after it kills it.
struct Proc {
  std::string name;
  std::vector<std::string> argv;
  std::string log;
  pid_t pid = -1;
  void Start() { pid = bench::Spawn(argv, log, /*append=*/true); }
  void Kill() {
    bench::Kill(pid);
    pid = -1;
  }
  void Stop() {
    bench::Stop(pid);
    pid = -1;
  }
};

struct Counts {
  std::atomic<long> submitted{0}, submit_failed{0}, cancelled{0}, batches{0}, redeemed{0},
      other_failed{0};
};

// Retries `op` while the server is down (it is killed on purpose), up to
// `patience`; Ok or the last error.
template <typename Op>
auto Patiently(Op op, std::chrono::seconds patience = std::chrono::seconds(30)) -> decltype(op()) {
  auto deadline = Clock::now() + patience;
  while (true) {
    auto r = op();
    if (r.ok() || r.status().code() != Code::kUnavailable || Clock::now() > deadline) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::string Trim(std::string s) {
  s.erase(s.find_last_not_of("\n") + 1);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* usage =
      "usage: tide-soak [--tide PATH] [--seconds 120] [--agents 3] [--kill-every 8] [--seed N]\n";
  const int parsed = bench::ParseFlags(argc, argv, usage, [&](const std::string& a,
                                                             const std::string& v) {
    if (a == "--tide") o.tide_bin = v;
    else if (a == "--seconds") o.seconds = atoi(v.c_str());
    else if (a == "--agents") o.agents = atoi(v.c_str());
    else if (a == "--kill-every") o.kill_every_s = atoi(v.c_str());
    else if (a == "--seed") o.seed = static_cast<unsigned>(strtoul(v.c_str(), nullptr, 10));
    else return false;
    return true;
  });
  if (parsed >= 0) return parsed;
  if (o.seconds < 10 || o.agents < 1 || o.kill_every_s < 1) {
    fprintf(stderr, "--seconds must be at least 10, --agents and --kill-every at least 1\n");
    return 2;
  }
  if (o.tide_bin.empty()) o.tide_bin = bench::DefaultTideBinary();
  if (o.seed == 0) o.seed = static_cast<unsigned>(getpid());
  std::mt19937 rng(o.seed);

  char tmpl[] = "/tmp/tide-soak-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ::chmod(dir.c_str(), 0711);
  const std::string trace = dir + "/trace";
  const std::string listen = "127.0.0.1:" + std::to_string(20000 + (getpid() + 11) % 20000);
  const std::string url = "http://" + listen;
  Proc server{"server",
              {o.tide_bin, "server", "--listen", listen, "--data-dir", dir + "/server",
               "--node-timeout", "3s", "--token-rate-limit", "off"},
              dir + "/server.log"};
  server.Start();
  auto connect = [&](const std::string& token) {
    return std::move(api::Client::Create(url, token, api::TlsTrust{})).value();
  };
  auto admin_token = bench::AwaitServer(*connect(""), dir + "/server", server.log);
  if (!admin_token.ok()) {
    fprintf(stderr, "%s\n", admin_token.status().message().c_str());
    server.Stop();
    return 1;
  }
  std::vector<std::string> secrets = {*admin_token};
  auto admin = connect(secrets[0]);
  // Jobs cost money: RTX4090 at 1 credit per GPU-hour; each user has credit.
  (void)admin->Call("POST", "/v1/admin/prices", json{{"per_gpu_hour", {{"RTX4090", "1"}}}});
  std::vector<std::string> users;
  for (const char* name : {"soak-a", "soak-b"}) {
    auto u = admin->CreateUser(name);
    if (!u.ok()) {
      fprintf(stderr, "cannot create a user: %s\n", u.status().ToString().c_str());
      server.Stop();
      return 1;
    }
    users.push_back(u->token);
    secrets.push_back(u->token);
    // Credit for the jobs' escrow; more arrives by cards while it runs.
    auto card = admin->Call("POST", "/v1/admin/cards", json{{"count", 1}, {"value", "1000"}});
    if (!card.ok() ||
        !connect(u->token)->Call("POST", "/v1/cards/redeem", json{{"code", (*card)["codes"][0]}}).ok()) {
      fprintf(stderr, "cannot fund %s\n", name);
      server.Stop();
      return 1;
    }
  }
  auto join = admin->CreateJoinToken("", false, "never");
  if (!join.ok()) {
    fprintf(stderr, "cannot make a join token: %s\n", join.status().ToString().c_str());
    server.Stop();
    return 1;
  }
  secrets.push_back(join->token);
  std::vector<Proc> agents;
  for (int i = 0; i < o.agents; ++i) {
    std::string name = "soak-agent-" + std::to_string(i);
    agents.push_back({name,
                      {o.tide_bin, "agent", "--server", url, "--join-token", join->token,
                       "--data-dir", dir + "/" + name, "--name", name, "--fake-gpus",
                       "2xRTX4090:24GB", "--runtime", "process", "--insecure-process-runtime",
                       "--heartbeat-interval", "500ms"},
                      dir + "/" + name + ".log"});
    agents.back().Start();
  }

  // Each attempt of a job writes "JOB ATTEMPT NANOS" five times a second,
  // and prints its secret into its log (which must mask it).
  const std::string secret = "secret_" + std::to_string(std::random_device{}()) + "-soak-value";
  secrets.push_back(secret);
  const std::string command =
      "echo \"the secret is $SOAK_SECRET\"; "
      "i=0; while [ $i -lt 10 ]; do echo \"$TIDE_JOB_ID $TIDE_ATTEMPT $(date +%s%N)\" >> " + trace +
      "; sleep 0.2; i=$((i+1)); done";
  const json spec = {{"command", {"sh", "-c", command}},
                     {"resources", {{"gpu_count", 1}}},
                     {"secrets", {{"SOAK_SECRET", secret}}},
                     {"max_runtime", "5m"}};

  Counts counts;
  std::mutex mu;
  std::map<std::string, std::string> acknowledged;  // job id -> its owner's token; guarded by mu
  std::vector<std::pair<std::string, std::string>> batch_ids;  // (id, token); guarded by mu
  std::atomic<bool> stop{false};
  const auto end = Clock::now() + std::chrono::seconds(o.seconds);

  std::vector<std::thread> workers;
  for (size_t u = 0; u < users.size(); ++u) {
    workers.emplace_back([&, u] {
      auto client = connect(users[u]);
      auto operator_client = connect(secrets[0]);  // a client is one thread's
      const api::JobSpec typed = std::move(api::JobSpecFromJson(spec)).value();
      std::mt19937 r(o.seed + static_cast<unsigned>(u) + 1);
      for (long n = 0; !stop; ++n) {
        // The same key on every retry: a submission acknowledged once.
        std::string key = "soak-" + std::to_string(u) + "-" + std::to_string(n);
        auto job = Patiently([&] { return client->SubmitJob(typed, key); });
        if (job.ok()) {
          counts.submitted++;
          std::lock_guard<std::mutex> lock(mu);
          acknowledged[job->id] = users[u];
        } else {
          counts.submit_failed++;
        }
        if (r() % 4 == 0 && job.ok()) {
          if (Patiently([&] { return client->CancelJob(job->id); }).ok()) counts.cancelled++;
        }
        if (r() % 15 == 0) {
          json file = {{"experiment_batch", "soak-" + key},
                       {"max_concurrent", 2},
                       {"template", spec},
                       {"grid", {{"x", {1, 2, 3}}}}};
          file["template"]["env"] = {{"X", "{x}"}};
          auto b = Patiently([&] {
            return client->CallWithHeaders("POST", "/v1/batches", file, {{"Idempotency-Key", key + "-batch"}});
          });
          if (b.ok()) {
            counts.batches++;
            std::lock_guard<std::mutex> lock(mu);
            batch_ids.emplace_back((*b)["id"].get<std::string>(), users[u]);
          } else {
            if (counts.other_failed++ == 0) {
              fprintf(stderr, "a batch was refused: %s\n", b.status().ToString().c_str());
            }
          }
        }
        if (r() % 10 == 0) {
          auto card = Patiently([&] {
            return operator_client->Call("POST", "/v1/admin/cards", json{{"count", 1}, {"value", "1"}});
          });
          if (card.ok()) {
            std::string code = (*card)["codes"][0];
            auto got = Patiently([&] {
              return client->Call("POST", "/v1/cards/redeem", json{{"code", code}});
            });
            // A redemption retried after a kill may find the card used by
            // its own first try: that is the card, once.
            if (got.ok() || got.status().message().find("already") != std::string::npos) {
              counts.redeemed++;
            } else {
              counts.other_failed++;
            }
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100 + r() % 200));
      }
    });
  }

  // The killer: the server or a random agent, SIGKILL, then started again.
  int server_kills = 0, agent_kills = 0;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(
        o.kill_every_s * 500 + static_cast<int>(rng() % (o.kill_every_s * 1000))));
    if (Clock::now() >= end) break;
    Proc& victim = rng() % 3 == 0 ? server : agents[rng() % agents.size()];
    victim.Kill();
    (&victim == &server ? server_kills : agent_kills)++;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 1500));
    victim.Start();
  }
  stop = true;
  for (auto& t : workers) t.join();

  // Settle: jobs that run finish (each takes 2 s); queued ones may wait.
  std::map<std::string, std::string> jobs;
  {
    std::lock_guard<std::mutex> lock(mu);
    jobs = acknowledged;
  }
  int missing = 0, unsettled = 0, overlaps = 0, negative = 0, leaked = 0, ledger_bad = 0;
  std::map<std::string, api::Job> final_jobs;
  const auto settle_deadline = Clock::now() + std::chrono::seconds(120);
  for (const auto& [id, token] : jobs) {
    auto client = connect(token);
    while (true) {
      auto j = Patiently([&] { return client->GetJob(id); });
      if (!j.ok()) {
        fprintf(stderr, "acknowledged job %s: %s\n", id.c_str(), j.status().ToString().c_str());
        missing++;
        break;
      }
      bool settled = api::IsTerminal(j->status) || j->status == api::JobStatus::kQueued;
      if (settled || Clock::now() > settle_deadline) {
        if (!settled) {
          fprintf(stderr, "job %s still %s after the settle\n", id.c_str(),
                  api::JobStatusName(j->status));
          unsettled++;
        }
        final_jobs[id] = *j;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  std::vector<std::pair<std::string, std::string>> batches;
  {
    std::lock_guard<std::mutex> lock(mu);
    batches = batch_ids;
  }
  for (const auto& [id, token] : batches) {
    if (!Patiently([&] { return connect(token)->Call("GET", "/v1/batches/" + id); }).ok()) {
      fprintf(stderr, "acknowledged batch %s is gone\n", id.c_str());
      missing++;
    }
  }

  // Two attempts of one job at once: their trace lines interleave in time.
  std::map<std::string, std::map<int, std::pair<long long, long long>>> spans;
  {
    std::ifstream in(trace);
    std::string job;
    int attempt = 0;
    long long at = 0;
    while (in >> job >> attempt >> at) {
      auto [it, fresh] = spans[job].try_emplace(attempt, at, at);
      it->second.first = std::min(it->second.first, at);
      it->second.second = std::max(it->second.second, at);
    }
  }
  long trace_jobs = static_cast<long>(spans.size());
  for (const auto& [job, attempts] : spans) {
    for (auto a = attempts.begin(); a != attempts.end(); ++a) {
      for (auto b = std::next(a); b != attempts.end(); ++b) {
        if (a->second.first <= b->second.second && b->second.first <= a->second.second) {
          fprintf(stderr, "job %s ran attempts %d and %d at once\n", job.c_str(), a->first,
                  b->first);
          overlaps++;
        }
      }
    }
  }

  auto check = Patiently([&] { return admin->Call("GET", "/v1/admin/ledger/check"); });
  if (!check.ok()) {
    fprintf(stderr, "ledger check: %s\n", check.status().ToString().c_str());
    ledger_bad++;
  }
  for (const std::string& token : users) {
    auto account = Patiently([&] { return connect(token)->Call("GET", "/v1/account"); });
    if (!account.ok()) continue;
    for (const char* field : {"available", "escrow"}) {
      const json& v = (*account)[field];
      if (v.is_number() && v.get<double>() < 0) {
        fprintf(stderr, "an account's %s is negative: %s\n", field, account->dump().c_str());
        negative++;
      }
    }
  }

  // Node tokens too: each agent's, as saved in its data dir.
  for (const Proc& a : agents) {
    auto t = ReadFile(dir + "/" + a.name + "/node.token");
    if (t.ok()) secrets.push_back(Trim(*t));
  }
  server.Stop();
  for (Proc& a : agents) a.Stop();
  // The daemons' logs, and every job log the server stored.
  std::vector<std::string> logs = {server.log};
  for (const Proc& a : agents) logs.push_back(a.log);
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/server/blobs/logs", ec)) {
    if (e.is_regular_file()) logs.push_back(e.path().string());
  }
  for (const std::string& log : logs) {
    auto text = ReadFile(log);
    if (!text.ok()) continue;
    for (const std::string& s : secrets) {
      // The secret part only: a token's prefix (tide_u_) names its kind.
      if (s.size() > 16 && text->find(s.substr(7)) != std::string::npos) {
        fprintf(stderr, "a token or secret appears in %s\n", log.c_str());
        leaked++;
      }
    }
  }

  long terminal = 0, queued = 0;
  for (const auto& [id, j] : final_jobs) (api::IsTerminal(j.status) ? terminal : queued)++;
  const int failures = missing + unsettled + overlaps + negative + leaked + ledger_bad;
  printf("tide-soak: %d s, %d agents, seed %u: %ld submissions acknowledged (%ld failed while the "
         "server was down), %ld cancels, %ld batches, %ld cards redeemed; %d server kills, %d agent "
         "kills; %zu jobs checked (%ld terminal, %ld queued), %ld ran; failures: %d missing, %d "
         "unsettled, %d overlapping attempts, %d negative accounts, %d ledger, %d tokens or secrets in logs\n",
         o.seconds, o.agents, o.seed, counts.submitted.load(), counts.submit_failed.load(),
         counts.cancelled.load(), counts.batches.load(), counts.redeemed.load(), server_kills,
         agent_kills, final_jobs.size(), terminal, queued, trace_jobs, missing, unsettled, overlaps,
         negative, ledger_bad, leaked);
  if (counts.submitted == 0 || server_kills + agent_kills == 0 || trace_jobs == 0) {
    fprintf(stderr, "nothing was measured (no acknowledged job, no kill, or no job ran); see %s\n",
            dir.c_str());
    return 1;
  }
  if (failures == 0 && !getenv("TIDE_SOAK_KEEP")) {
    std::system(("rm -rf " + dir).c_str());
  } else {
    fprintf(stderr, "logs kept in %s\n", dir.c_str());
  }
  return failures == 0 ? 0 : 1;
}
