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
// prints its figures and stops both by pid. With --tls on the server speaks
// HTTPS (a self-signed certificate, clients and the agent trusting it by
// pin); --tls both runs plain HTTP and TLS, alternating for --rounds, and
// prints what TLS costs (medians).
// Keep-alive connections pay the handshake once each.
//
// With --flood N it measures instead what one token's flood does to another
// token's submissions, on a server with its default limits (or, with
// --flood-limit, that --token-rate-limit for every token): a steady
// token submits at --steady-rate jobs/s for --seconds, alone and then
// beside N connections of a second token that submit as fast as they can
// (no retries: each 429 is counted), alternating for --rounds; it prints
// the steady token's rate and latencies both ways, and the flood's
// answers.
//
// It fails (exit 1) when a figure measured nothing: no submission
// acknowledged, or no job that started.
//
//   tide-load [--tide PATH] [--connections 8] [--jobs 4000] [--latency-jobs 50]
//             [--priced on|off] [--batch-trials 10000] [--tls off|on|both]
//             [--rounds N]
//   tide-load --flood 16 [--steady-rate 200] [--seconds 10] [--rounds 3] [--flood-limit R/s:B]
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
#include "api/http_client.h"
#include "bench/processes.h"
#include "common/paths.h"
#include "common/tls.h"

using namespace tide;
using tide::bench::Median;
using tide::bench::ParseFlags;
using tide::bench::Percentile;
using tide::bench::Spawn;
using tide::bench::Stop;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string tide_bin;
  int connections = 8, jobs = 4000, latency_jobs = 50, batch_trials = 10'000;
  bool priced = false;  // --priced on: every submission holds escrow in the ledger
  int rounds = 1;       // runs of each kind
  int flood = 0;        // --flood N: connections of the flooding token
  int steady_rate = 200;
  int seconds = 10;
  std::string flood_limit;  // --flood-limit: the server's --token-rate-limit; "" = its default
};

struct Figures {
  double submissions_per_s = 0;
  double p50_ms = 0, p99_ms = 0;
};

// One server and one agent, measured; false when something did not run.
bool RunOnce(const Options& o, bool tls, Figures* figures) {
  const std::string& tide_bin = o.tide_bin;
  const int connections = o.connections, jobs = o.jobs, latency_jobs = o.latency_jobs,
            batch_trials = o.batch_trials;
  const bool priced = o.priced;
  const char* label = tls ? "[https] " : "[http] ";
  ::sync();  // the last run's files are not written back while this one measures
  char tmpl[] = "/tmp/tide-load-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  ::chmod(dir.c_str(), 0711);  // sandboxed jobs run as uids of their own and traverse to their dirs
  std::string listen = "127.0.0.1:" + std::to_string(20000 + (getpid() + (tls ? 1 : 0)) % 20000);
  std::string url = (tls ? "https://" : "http://") + listen;
  // The server's capacity is measured, not its per-token rate limit.
  std::vector<std::string> server_argv = {tide_bin,      "server",         "--listen",
                                          listen,        "--data-dir",     dir + "/server",
                                          "--token-rate-limit", "off"};
  if (tls) server_argv.push_back("--tls-self-signed");
  pid_t server = Spawn(server_argv, dir + "/server.log");
  api::TlsTrust trust;
  if (tls) {
    for (int i = 0; i < 200 && trust.pins.empty(); ++i) {
      auto pem = ReadFile(dir + "/server/tls/cert.pem");
      auto info = pem.ok() ? tls::Inspect(*pem) : Result<tls::CertificateInfo>(pem.status());
      if (info.ok()) {
        trust.pins.push_back(info->pin);
      } else {
        usleep(50'000);
      }
    }
  }
  auto connect = [&](const std::string& token) {
    return std::move(api::Client::Create(url, token, trust)).value();
  };
  auto admin_token = tide::bench::AwaitServer(*connect(""), dir + "/server", dir + "/server.log");
  if (!admin_token.ok()) {
    fprintf(stderr, "%s\n", admin_token.status().message().c_str());
    Stop(server);
    return false;
  }
  auto admin = connect(*admin_token);
  std::string user = admin->CreateUser("load")->token;
  if (priced) {
    // H100 at 2 credits per GPU-hour, and plenty of credit: each submission
    // of the throughput run holds 2 credits (1 GPU x max_runtime 1h).
    (void)admin->Call("POST", "/v1/admin/prices", nlohmann::json{{"per_gpu_hour", {{"H100", "2"}}}});
    auto card = admin->Call("POST", "/v1/admin/cards", nlohmann::json{{"count", 1}, {"value", "1000000"}});
    auto user_client = connect(user);
    if (!card.ok() ||
        !user_client->Call("POST", "/v1/cards/redeem", nlohmann::json{{"code", (*card)["codes"][0]}}).ok()) {
      fprintf(stderr, "could not fund the load user\n");
      Stop(server);
      return false;
    }
  }
  // Over TLS the join token carries the server's pins: the agent needs nothing else.
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
    return false;
  }

  // 1. Throughput: jobs that wait (no node has their GPU type), so the
  // figure is the API and the store, not the agent.
  std::atomic<int> next{0}, failed{0};
  // The clients are made before the clock starts; each connects (and over
  // TLS shakes hands) on its first submission, inside the measured time.
  std::vector<std::unique_ptr<api::Client>> clients;
  for (int c = 0; c < connections; ++c) clients.push_back(connect(user));
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      api::Client* client = clients[c].get();
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
  printf("%sdurable submissions%s: %d jobs over %d connections in %.2f s = %.0f jobs/s (%d failed)\n",
         label, priced ? " (priced: each holds escrow)" : "", jobs, connections, secs, jobs / secs,
         failed.load());

  // Clear the waiting jobs so the latency run sees an idle cluster.
  auto client = connect(user);
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
  printf("%ssubmit-to-running latency over %zu jobs: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
         label, lat.size(), Percentile(lat, 50), Percentile(lat, 99), Percentile(lat, 100));
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
      printf("%sone batch of %d trials: accepted (durable) in %.2f s, %zu trials listed after %.2f s, "
             "cancelled in %.2f s%s\n",
             label, (*batch)["trials"].get<int>(), accept, listed, visible, cancel,
             cancelled.ok() ? "" : " (cancel failed)");
    }
  }
  Stop(agent);
  Stop(server);
  if (!getenv("TIDE_LOAD_KEEP")) std::system(("rm -rf " + dir).c_str());
  figures->submissions_per_s = (jobs - failed.load()) / secs;
  figures->p50_ms = Percentile(lat, 50);
  figures->p99_ms = Percentile(lat, 99);
  bool measured = true;
  if (failed.load() == jobs) {
    fprintf(stderr, "%sno submission was acknowledged: nothing measured\n", label);
    measured = false;
  }
  if (latency_jobs > 0 && lat.empty()) {
    fprintf(stderr, "%sno job started: no latency measured; see the agent's log (TIDE_LOAD_KEEP=1 keeps %s)\n",
            label, dir.c_str());
    measured = false;
  }
  return measured && failed.load() == 0;
}

// The steady token's figures over one phase.
struct Steady {
  double per_s = 0, p50_ms = 0, p99_ms = 0;
  int failed = 0;
};

// One server (default limits, no agent: the jobs wait), measured alone and
// beside a flood, --rounds times; false when nothing was measured.
bool RunFlood(const Options& o) {
  char tmpl[] = "/tmp/tide-flood-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string listen = "127.0.0.1:" + std::to_string(20000 + (getpid() + 7) % 20000);
  std::string url = "http://" + listen;
  std::vector<std::string> server_argv = {o.tide_bin, "server", "--listen", listen, "--data-dir",
                                          dir + "/server"};
  if (!o.flood_limit.empty()) {
    server_argv.insert(server_argv.end(), {"--token-rate-limit", o.flood_limit});
  }
  pid_t server = Spawn(server_argv, dir + "/server.log");
  auto connect = [&](const std::string& token) {
    return std::move(api::Client::Create(url, token, api::TlsTrust{})).value();
  };
  auto admin_token = tide::bench::AwaitServer(*connect(""), dir + "/server", dir + "/server.log");
  if (!admin_token.ok()) {
    fprintf(stderr, "%s\n", admin_token.status().message().c_str());
    Stop(server);
    return false;
  }
  auto admin = connect(*admin_token);
  std::string steady_token = admin->CreateUser("steady")->token;
  std::string flood_token = admin->CreateUser("flood")->token;
  const nlohmann::json spec = {{"name", "load"},
                               {"command", {"true"}},
                               {"resources", {{"gpu_type", "H100"}, {"gpu_count", 1}}}};
  const std::string body = spec.dump();

  // The steady token: two connections, each at half the rate, paced by
  // the clock (a late request does not make the next one early).
  auto steady_phase = [&]() {
    std::vector<std::vector<double>> lat(2);
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (int c = 0; c < 2; ++c) {
      threads.emplace_back([&, c] {
        auto client = connect(steady_token);
        const api::JobSpec typed = std::move(api::JobSpecFromJson(spec)).value();
        const double gap_s = 2.0 / o.steady_rate;
        for (int i = 0;; ++i) {
          auto due = t0 + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>((i + c * 0.5) * gap_s));
          if (due - t0 > std::chrono::seconds(o.seconds)) break;
          std::this_thread::sleep_until(due);
          auto s0 = Clock::now();
          if (client->SubmitJob(typed).ok()) {
            lat[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
          } else {
            failed++;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<double> all = lat[0];
    all.insert(all.end(), lat[1].begin(), lat[1].end());
    return Steady{all.size() / secs, Percentile(all, 50), Percentile(all, 99), failed.load()};
  };

  std::vector<Steady> alone, beside;
  long flood_sent = 0, flood_ok = 0, flood_limited = 0;
  double flood_secs = 0;
  for (int round = 0; round < o.rounds; ++round) {
    alone.push_back(steady_phase());
    std::atomic<bool> stop{false};
    std::atomic<long> sent{0}, ok{0}, limited{0};
    std::vector<std::thread> flooders;
    for (int f = 0; f < o.flood; ++f) {
      flooders.emplace_back([&] {
        auto http = std::move(api::HttpClient::Create(url, api::TlsTrust{})).value();
        while (!stop) {
          auto r = http->Do("POST", "/v1/jobs", body,
                            {{"Authorization", "Bearer " + flood_token},
                             {"Content-Type", "application/json"}});
          sent++;
          if (r.ok() && r->status == 201) ok++;
          if (r.ok() && r->status == 429) limited++;
        }
      });
    }
    auto f0 = Clock::now();
    beside.push_back(steady_phase());
    stop = true;
    for (auto& t : flooders) t.join();
    flood_secs += std::chrono::duration<double>(Clock::now() - f0).count();
    flood_sent += sent;
    flood_ok += ok;
    flood_limited += limited;
    const Steady& a = alone.back();
    const Steady& b = beside.back();
    printf("round %d: steady token alone %.0f jobs/s p50 %.1f ms p99 %.1f ms; beside the flood "
           "%.0f jobs/s p50 %.1f ms p99 %.1f ms (flood: %ld requests, %ld accepted, %ld refused 429)\n",
           round + 1, a.per_s, a.p50_ms, a.p99_ms, b.per_s, b.p50_ms, b.p99_ms, sent.load(),
           ok.load(), limited.load());
  }
  Stop(server);
  if (!getenv("TIDE_LOAD_KEEP")) std::system(("rm -rf " + dir).c_str());
  int failed = 0;
  for (const auto& v : {alone, beside}) {
    for (const Steady& s : v) failed += s.failed;
  }
  double a = Median(alone, &Steady::per_s), b = Median(beside, &Steady::per_s);
  if (a <= 0 || b <= 0 || flood_sent == 0) {
    fprintf(stderr, "nothing measured: steady %.0f / %.0f jobs/s, %ld flood requests\n", a, b,
            flood_sent);
    return false;
  }
  printf("steady token at %d jobs/s (medians of %d rounds of %d s): alone %.0f jobs/s, p50 %.1f ms, "
         "p99 %.1f ms; beside %d flooding connections %.0f jobs/s, p50 %.1f ms, p99 %.1f ms; "
         "%d failed. The flood: %.0f requests/s, %.0f accepted/s, %.0f refused/s\n",
         o.steady_rate, o.rounds, o.seconds, a, Median(alone, &Steady::p50_ms),
         Median(alone, &Steady::p99_ms), o.flood, b, Median(beside, &Steady::p50_ms),
         Median(beside, &Steady::p99_ms), failed, flood_sent / flood_secs, flood_ok / flood_secs,
         flood_limited / flood_secs);
  return failed == 0;
}

const char kUsage[] =
    "usage: tide-load [--tide PATH] [--connections 8] [--jobs 4000] [--latency-jobs 50]\n"
    "                 [--priced on|off] [--batch-trials 10000] [--tls off|on|both]\n"
    "                 [--rounds 1]\n"
    "       tide-load --flood N [--steady-rate 200] [--seconds 10] [--rounds 3]\n"
    "                 [--flood-limit RATE/s:BURST]\n"
    "Starts a tide server and agent on loopback and prints durable submissions/s,\n"
    "submit-to-running latency and one batch's figures; --tls both measures plain\n"
    "HTTP and HTTPS, alternating for --rounds, and prints what TLS costs.\n"
    "--flood N measures a steady token's submissions alone and beside N connections\n"
    "of another token submitting as fast as they can (the server's default limits,\n"
    "or --flood-limit as every token's --token-rate-limit).\n";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string tls = "off";
  const int parsed = ParseFlags(argc, argv, kUsage, [&](const std::string& a, const std::string& v) {
    if (a == "--tide") o.tide_bin = v;
    else if (a == "--connections") o.connections = atoi(v.c_str());
    else if (a == "--jobs") o.jobs = atoi(v.c_str());
    else if (a == "--latency-jobs") o.latency_jobs = atoi(v.c_str());
    else if (a == "--batch-trials") o.batch_trials = atoi(v.c_str());
    else if (a == "--priced" && (v == "on" || v == "off")) o.priced = v == "on";
    else if (a == "--rounds") o.rounds = atoi(v.c_str());
    else if (a == "--flood") o.flood = atoi(v.c_str());
    else if (a == "--steady-rate") o.steady_rate = atoi(v.c_str());
    else if (a == "--seconds") o.seconds = atoi(v.c_str());
    else if (a == "--flood-limit") o.flood_limit = v;
    else if (a == "--tls" && (v == "off" || v == "on" || v == "both")) tls = v;
    else return false;
    return true;
  });
  if (parsed >= 0) return parsed;
  if (o.connections < 1 || o.jobs < 1 || o.latency_jobs < 0 || o.rounds < 1) {
    fprintf(stderr, "--connections, --jobs and --rounds must be at least 1, --latency-jobs at least 0\n");
    return 2;
  }
  if (o.tide_bin.empty()) o.tide_bin = tide::bench::DefaultTideBinary();
  if (o.flood != 0) {
    if (o.flood < 1 || o.steady_rate < 2 || o.seconds < 1) {
      fprintf(stderr, "--flood must be at least 1, --steady-rate at least 2, --seconds at least 1\n");
      return 2;
    }
    return RunFlood(o) ? 0 : 1;
  }
  // --tls both alternates (plain, TLS, TLS, plain, ...) so that neither
  // always runs second on a machine still busy with the first.
  std::vector<Figures> plain, secure;
  bool ok = true;
  for (int round = 0; round < o.rounds && ok; ++round) {
    bool tls_first = tls == "on" || (tls == "both" && round % 2 == 1);
    for (bool with_tls : {tls_first, !tls_first}) {
      if ((with_tls && tls == "off") || (!with_tls && tls == "on")) continue;
      Figures f;
      ok = RunOnce(o, with_tls, &f) && ok;
      (with_tls ? secure : plain).push_back(f);
    }
  }
  if (tls == "both" && ok) {
    double p = Median(plain, &Figures::submissions_per_s), t = Median(secure, &Figures::submissions_per_s);
    printf("TLS costs %.1f%% of durable submissions/s (medians of %d rounds: %.0f -> %.0f jobs/s); "
           "start p50 %.0f -> %.0f ms\n",
           100.0 * (1.0 - t / p), o.rounds, p, t, Median(plain, &Figures::p50_ms),
           Median(secure, &Figures::p50_ms));
  }
  return ok ? 0 : 1;
}
