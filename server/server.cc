#include "server/server.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "common/log.h"
#include "common/paths.h"
#include "server/blob_store.h"
#include "server/core.h"
#include "server/http/api.h"
#include "server/http/http_server.h"
#include "store/store.h"

namespace tide::server {

int RunServer(const ServerOptions& options) {
  InitLogging("server", options.log_level);
  // Signals go to one thread that shuts the server down in order.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

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
  spdlog::info("listening on http://{}", *bound);

  std::thread([http, signals]() mutable {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("signal {}: shutting down", sig);
    http->Shutdown();
  }).detach();
  http->Serve();
  core->Stop();  // everything acknowledged is already durable
  spdlog::info("stopped");
  return 0;
}

}  // namespace tide::server
