// Harness for end-to-end tests: real processes, real HTTP, loopback only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/client.h"

namespace tide::e2e {

// A child process started with fork/exec; output goes to a log file.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  // Starts `argv` with extra environment variables (an empty value unsets
  // one); stdout and stderr go to `log_path`.
  void Start(const std::vector<std::string>& argv, const std::string& log_path,
             const std::map<std::string, std::string>& env = {});
  void Signal(int sig);
  // Waits for exit up to `timeout`; returns the exit status (or -1).
  int Wait(std::chrono::milliseconds timeout);
  bool Running();
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  std::string log_path_;
};

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class Cluster {
 public:
  // node_timeout: how fast the server declares a silent agent lost.
  // tls: the server speaks HTTPS with a self-signed certificate and every
  // client trusts it by pin (by default with TIDE_E2E_TLS=1).
  explicit Cluster(std::string node_timeout = "3s", bool tls = TlsByDefault());
  ~Cluster();

  // `extra_args` go to this start of `tide server` only.
  void StartServer(const std::vector<std::string>& extra_args = {});
  void KillServer(int sig);
  // Starts an agent and waits until the server lists it. It joins with the
  // cluster's join token unless `extra_args` holds a --join-token, and runs
  // jobs as uids of JobUids() unless it holds --job-uids.
  void StartAgent(const std::string& name, const std::string& fake_gpus,
                  const std::vector<std::string>& extra_args = {});
  Process& agent(const std::string& name) { return *agents_.at(name); }
  // The block of job uids this test process's agents use: suites that run
  // at once (plain and TLS) never run jobs as the same uid, so a count of a
  // uid's processes sees only this suite's jobs.
  static std::string JobUids();
  static int64_t FirstJobUid();

  // A new user; returns its token.
  std::string NewUser(const std::string& name);
  std::unique_ptr<api::Client> ClientFor(const std::string& token) const;
  api::Client& admin() { return *admin_; }
  // The server's admin token (for admin commands through Cli).
  std::string admin_token() const;

  // Runs `tide ARGS` with TIDE_SERVER and TIDE_TOKEN set, in the directory
  // `cwd` (default: the test's own; `tide sbatch` uploads the directory it
  // runs in).
  CliResult Cli(const std::vector<std::string>& args, const std::string& token,
                const std::string& cwd = "") const;
  // Starts `tide ARGS` in the background; its output goes to `out_path`.
  std::unique_ptr<Process> CliBackground(const std::vector<std::string>& args,
                                         const std::string& token, const std::string& out_path) const;

  const std::string& url() const { return url_; }
  // "curl -s", trusting the server's certificate when it speaks TLS.
  std::string curl() const;
  // TIDE_E2E_TLS=1: every cluster speaks TLS (one CI pass runs so).
  static bool TlsByDefault();
  bool tls() const { return tls_; }
  // The server's current certificate pin (TLS only).
  std::string pin() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string url_;
  std::string listen_;
  std::string node_timeout_;
  std::string join_token_;
  std::unique_ptr<Process> server_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  std::unique_ptr<api::Client> admin_;
  int server_starts_ = 0;
  bool tls_ = false;
};

// A loopback port free now (bound and let go).
int FreePort();
// Runs a shell command line; returns what it printed (stdout and stderr).
std::string Shell(const std::string& line);

// Polls `cond` every 50 ms until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& cond,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

std::string ReadAll(const std::string& path);
std::string MakeTempDir(const std::string& prefix);
// Submits `spec`, failing the test (and returning "") if it is refused.
std::string SubmitOk(api::Client& client, const nlohmann::json& spec);
// The typed spec of a test's JSON literal, which must be valid.
api::JobSpec Spec(const nlohmann::json& spec);
// POST /v1/jobs with `spec` exactly as given: for tests of what the server
// refuses (SubmitJob sends only specs that are already typed).
Result<api::Job> PostJobJson(api::Client& client, const nlohmann::json& spec);
// Waits for a job to reach a terminal status; returns it.
api::Job WaitTerminal(api::Client& client, const std::string& id,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));
// True if the process is gone (or a zombie).
bool ProcessGone(pid_t pid);
// Host pids of the processes whose environment holds TIDE_JOB_ID=`job`
// (a sandboxed job sees other pids inside its pid namespace).
std::vector<pid_t> JobProcesses(const std::string& job);

}  // namespace tide::e2e
