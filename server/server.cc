#include "server/server.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/paths.h"
#include "common/tls.h"
#include "server/blob_store.h"
#include "server/core.h"
#include "server/http/api.h"
#include "server/http/http_server.h"
#include "store/store.h"

namespace tide::server {

namespace {

bool IsLoopback(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  return host.empty() || host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr int64_t kDay = 86'400;

// DATA_DIR/tls/{key,cert}.pem: made on first start, the certificate
// renewed with the same key (so the same pin) when under 30 days are left.
Status EnsureSelfSigned(const std::string& dir, const std::string& listen) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  std::string key_path = dir + "/key.pem", cert_path = dir + "/cert.pem";
  auto key = ReadFile(key_path);
  if (!key.ok()) {
    auto made = tls::NewKey();
    if (!made.ok()) return made.status();
    if (Status st = WriteFileAtomic(key_path, *made, 0600); !st.ok()) return st;
    key = *made;
  }
  int64_t now = time(nullptr);
  if (auto cert = ReadFile(cert_path); cert.ok()) {
    auto info = tls::Inspect(*cert);
    auto pin = tls::PinOfKey(*key);
    if (info.ok() && pin.ok() && info->pin == *pin && info->not_after_s - now > 30 * kDay) {
      return Status::Ok();
    }
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<std::string> hosts;
  if (host[0]) hosts.push_back(host);
  std::string ip = listen.substr(0, listen.rfind(':'));
  if (!ip.empty() && ip != "0.0.0.0" && ip != "::" && ip != "[::]") hosts.push_back(ip);
  for (const char* h : {"localhost", "127.0.0.1", "::1"}) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  auto cert = tls::SelfSigned({*key, hosts, now - 3600, now + 397 * kDay});
  if (!cert.ok()) return cert.status();
  return WriteFileAtomic(cert_path, *cert, 0644);
}

// Logs the certificate's pin and fingerprint; returns the pin ("" if unreadable).
std::string PrintCertificate(const std::string& cert_file, bool self_signed) {
  auto pem = ReadFile(cert_file);
  auto info = pem.ok() ? tls::Inspect(*pem) : Result<tls::CertificateInfo>(pem.status());
  if (!info.ok()) {
    spdlog::warn("cannot read back {}: {}", cert_file, info.status().ToString());
    return "";
  }
  char until[32];
  time_t t = static_cast<time_t>(info->not_after_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  strftime(until, sizeof(until), "%Y-%m-%d", &tm);
  spdlog::info("TLS certificate {} ({}, valid until {})", cert_file,
               self_signed ? "self-signed" : "given", until);
  spdlog::info("TLS pin {} (clients: --pin; join tokens carry it)", info->pin);
  spdlog::info("TLS fingerprint SHA-256 {}", info->fingerprint);
  return info->pin;
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
  core_options.report_grace_ms = std::max<int64_t>(options.node_timeout_ms, 5'000);
  core_options.telemetry.low_utilization_window_ms = options.low_utilization_window_ms;
  auto* core = new Core(store->release(), SystemClock::Default(), core_options);
  core->set_code_checker(
      [blobs](const std::string& owner, const std::string& id) { return blobs->HasCode(owner, id); });
  if (Status st = core->Recover(); !st.ok()) {
    spdlog::error("recovery failed: {}", st.ToString());
    return 1;
  }
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
  auto* http = new HttpServer([api](const Request& r) { return api->Handle(r); }, &Api::BodyLimit);
  std::string cert_file = options.tls_cert, key_file = options.tls_key;
  bool self_signed = options.tls_self_signed ||
                     (cert_file.empty() && !options.insecure_http && !IsLoopback(options.listen));
  if (self_signed) {
    std::string dir = options.data_dir + "/tls";
    if (Status st = EnsureSelfSigned(dir, options.listen); !st.ok()) {
      spdlog::error("self-signed certificate: {}", st.ToString());
      return 1;
    }
    cert_file = dir + "/cert.pem";
    key_file = dir + "/key.pem";
  }
  if (!cert_file.empty()) {
    if (Status st = http->EnableTls(cert_file, key_file); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
    std::string pin = PrintCertificate(cert_file, self_signed);
    if (!pin.empty()) api->set_tls_pins({pin});
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

  std::thread([http, api, signals, self_signed, data_dir = options.data_dir, listen = options.listen,
               cert_file]() mutable {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig != SIGHUP) {
        spdlog::info("signal {}: shutting down", sig);
        http->Shutdown();
        return;
      }
      // SIGHUP: read the certificate and key again (renewing a self-signed one).
      if (!http->tls()) continue;
      Status st = self_signed ? EnsureSelfSigned(data_dir + "/tls", listen) : Status::Ok();
      if (st.ok()) st = http->ReloadTls();
      if (!st.ok()) {
        spdlog::error("SIGHUP: keeping the old certificate: {}", st.ToString());
      } else {
        spdlog::info("SIGHUP: certificate reloaded");
        std::string pin = PrintCertificate(cert_file, self_signed);
        if (!pin.empty()) api->set_tls_pins({pin});
      }
    }
  }).detach();
  http->Serve();
  core->Stop();  // everything acknowledged is already durable
  spdlog::info("stopped");
  return 0;
}

}  // namespace tide::server
