// `tide server`: the control plane process.
#pragma once

#include <cstdint>
#include <string>

namespace tide::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7460";  // HOST:PORT; port 0 picks a free one
  std::string data_dir = ".tide/server";  // tide.db, blobs/, admin.token
  int64_t node_timeout_ms = 10'000;       // heartbeats missing this long: node lost
  // How long a node token lives (renewed in heartbeats); 0: for ever.
  int64_t node_token_life_ms = 30LL * 24 * 3'600'000;
  int64_t retention_ms = 0;  // 0: ended jobs' data is kept until tide rm
  // A running job whose GPUs average under 10% utilisation for this long is
  // flagged low_utilization (server/telemetry.h).
  int64_t low_utilization_window_ms = 10 * 60'000;
  int io_threads = 0;                     // 0: one per connection (default)
  std::string log_level = "info";
  // Written once listening: the actual "HOST:PORT" (useful with port 0).
  std::string port_file;
  // TLS (docs/security.md). With a certificate and key (PEM files) the
  // server speaks HTTPS. Without them, a server listening beyond loopback
  // makes a self-signed certificate in DATA_DIR/tls on first start (or
  // always, with tls_self_signed) and prints its pin; plain HTTP beyond
  // loopback needs insecure_http. The next key's pin is announced to
  // agents ahead of a rotation (a self-signed server keeps its own).
  // SIGHUP or a replaced file reloads them.
  std::string tls_cert, tls_key, tls_next_key;
  bool tls_self_signed = false;
  bool insecure_http = false;
  // Requests per second of each user or admin token, and of each address
  // without a valid token: "RATE/s[:BURST]" or "off" (docs/security.md).
  std::string token_rate_limit = "1000/s:2000";
  std::string address_rate_limit = "20/s:100";
  // Requests of one user or admin token open at once: a count or "off".
  std::string token_inflight_limit = "256";
};

// Runs until SIGINT or SIGTERM. Returns the process exit code.
int RunServer(const ServerOptions& options);

}  // namespace tide::server
