#include "server/server.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <thread>
#include <tuple>

#include "common/log.h"
#include "common/paths.h"
#include "server/blob_store.h"
#include "server/core.h"
#include "server/http/api.h"
#include "server/http/http_server.h"
#include "server/http/rate_limiter.h"
#include "server/tls_files.h"
#include "store/store.h"

namespace tide::server {

namespace {

bool IsLoopback(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  return host.empty() || host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

// Lifts the soft limit on open files to the hard one: each connection
// holds a socket and its own event loop's descriptors.
void RaiseFileLimit() {
  rlimit r {};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// How often the signal thread looks for replaced certificate files.
constexpr int kTlsCheckS = 5;

}  // namespace

int RunServer(const ServerOptions& options) {
  InitLogging("server", options.log_level);
  // Signals go to one thread that shuts the server down in order.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    spdlog::error("--tls-cert and --tls-key go together");
    return 1;
  }
  if (!options.tls_cert.empty() && (options.tls_self_signed || options.insecure_http)) {
    spdlog::error("--tls-cert contradicts {}",
                  options.tls_self_signed ? "--tls-self-signed" : "--insecure-http");
    return 1;
  }
  if (!options.tls_next_key.empty() && options.tls_cert.empty()) {
    spdlog::error("--tls-next-key goes with --tls-cert (a self-signed server keeps its own next key)");
    return 1;
  }
  if (options.tls_self_signed && options.insecure_http) {
    spdlog::error("--tls-self-signed contradicts --insecure-http");
    return 1;
  }

  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    spdlog::error("cannot create data dir {}: {}", options.data_dir, ec.message());
    return 1;
  }
  ::chmod(options.data_dir.c_str(), 0700);

  auto store = store::OpenSqliteStore(options.data_dir + "/tide.db");
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }
  // These live until the process exits: connection threads may still hold
  // them while the process ends.
  auto* blobs = new BlobStore(options.data_dir + "/blobs");
  if (Status st = blobs->Init(); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  CoreOptions core_options;
  core_options.node_timeout_ms = options.node_timeout_ms;
  core_options.node_token_life_ms = options.node_token_life_ms;
  core_options.report_grace_ms = std::max<int64_t>(options.node_timeout_ms, 5'000);
  core_options.telemetry.low_utilization_window_ms = options.low_utilization_window_ms;
  core_options.retention_ms = options.retention_ms;
  auto* core = new Core(store->release(), SystemClock::Default(), core_options);
  core->set_code_checker(
      [blobs](const std::string& owner, const std::string& id) { return blobs->HasCode(owner, id); });
  auto delete_blobs = [blobs](const std::vector<DeletedBlobs>& deleted) {
    for (const DeletedBlobs& d : deleted) {
      Status st = d.job_id.empty() ? Status::Ok() : blobs->DeleteJob(d.job_id);
      if (st.ok() && !d.code.empty()) st = blobs->DeleteCode(d.owner, d.code);
      if (!st.ok()) spdlog::error("deleting {}: {}", d.job_id.empty() ? d.code : d.job_id, st.ToString());
    }
  };
  core->set_blob_deleter(delete_blobs);
  if (Status st = core->Recover(); !st.ok()) {
    spdlog::error("recovery failed: {}", st.ToString());
    return 1;
  }
  // A deletion is durable before its blobs go: finish any a crash cut short.
  delete_blobs(core->DeletedJobs());
  auto admin = core->EnsureAdminToken();
  if (!admin.ok()) {
    spdlog::error("{}", admin.status().ToString());
    return 1;
  }
  std::string admin_path = options.data_dir + "/admin.token";
  if (!admin->empty()) {
    if (Status st = WriteFileAtomic(admin_path, *admin + "\n", 0600); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
    spdlog::info("admin token written to {}", admin_path);
  }
  core->Start();

  auto* api = new Api(core, blobs, SystemClock::Default());
  RateLimit per_token, per_address;
  for (auto [flag, text, limit] : {std::tuple{"--token-rate-limit", &options.token_rate_limit, &per_token},
                                   std::tuple{"--address-rate-limit", &options.address_rate_limit,
                                              &per_address}}) {
    if (!ParseRateLimit(*text, limit)) {
      spdlog::error("{}: \"{}\" is not RATE/s[:BURST] (e.g. 1000/s:2000) or off", flag, *text);
      return 1;
    }
  }
  api->set_rate_limits(per_token, per_address);
  int inflight = 0;
  if (!ParseInFlightLimit(options.token_inflight_limit, &inflight)) {
    spdlog::error("--token-inflight-limit: \"{}\" is not a count of requests (e.g. 256) or off",
                  options.token_inflight_limit);
    return 1;
  }
  api->set_inflight_limit(inflight);
  auto* http = new HttpServer([api](const Request& r) { return api->Handle(r); }, &Api::BodyLimit);
  bool self_signed = options.tls_self_signed || (options.tls_cert.empty() && !options.insecure_http &&
                                                  !IsLoopback(options.listen));
  std::unique_ptr<TlsFiles> tls;
  if (self_signed || !options.tls_cert.empty()) {
    tls = std::make_unique<TlsFiles>(TlsFileOptions{options.tls_cert, options.tls_key,
                                                    options.tls_next_key, self_signed,
                                                    options.data_dir + "/tls", options.listen});
    Status st = tls->Prepare();
    if (st.ok()) st = http->EnableTls(tls->cert_file(), tls->key_file());
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
    tls->Log();
    api->set_tls_pins(tls->pins());
  } else if (!IsLoopback(options.listen)) {
    spdlog::warn("--insecure-http: tokens and code cross the network in clear text");
  }
  auto bound = http->Listen(options.listen);
  if (!bound.ok()) {
    spdlog::error("{}", bound.status().ToString());
    return 1;
  }
  if (!options.port_file.empty()) {
    if (Status st = WriteFileAtomic(options.port_file, *bound + "\n"); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
  }
  spdlog::info("listening on {}://{}", http->tls() ? "https" : "http", *bound);

  std::thread([http, api, signals, tls = std::move(tls)]() {
    const timespec tick = {kTlsCheckS, 0};
    for (;;) {
      int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        spdlog::info("signal {}: shutting down", sig);
        http->Shutdown();
        return;
      }
      // SIGHUP, or a certificate file replaced: read them again (renewing
      // a self-signed certificate). Open connections keep the old one.
      if (!tls || (sig != SIGHUP && !tls->Changed())) continue;
      Status st = tls->Prepare();
      if (st.ok()) st = http->ReloadTls();
      if (!st.ok()) {
        spdlog::error("{}: keeping the old certificate: {}",
                      sig == SIGHUP ? "SIGHUP" : "certificate files changed", st.ToString());
        continue;
      }
      spdlog::info("{}: certificate reloaded", sig == SIGHUP ? "SIGHUP" : "certificate files changed");
      tls->Log();
      api->set_tls_pins(tls->pins());
    }
  }).detach();
  http->Serve();
  core->Stop();  // everything acknowledged is already durable
  spdlog::info("stopped");
  return 0;
}

}  // namespace tide::server
