#include "bench/processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/paths.h"

namespace tide::bench {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, bool append) {
  fflush(stdout);  // else the child writes what is buffered again
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      if (fd > 2) ::close(fd);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(50'000);
  }
  Kill(pid);
}

void Kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

Result<std::string> AwaitServer(api::Client& probe, const std::string& data_dir,
                                const std::string& log) {
  for (int i = 0; i < 200 && !probe.Health().ok(); ++i) usleep(50'000);
  auto token = ReadFile(data_dir + "/admin.token");
  if (!token.ok() || !probe.Health().ok()) {
    return Status::Unavailable("the server did not start; see " + log);
  }
  std::string t = *token;
  t.erase(t.find_last_not_of("\n") + 1);
  return t;
}

std::string ThisProgramsDir() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[n > 0 ? n : 0] = '\0';
  std::string dir = self;
  return dir.substr(0, dir.rfind('/'));
}

std::string DefaultTideBinary() { return ThisProgramsDir() + "/../tide"; }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int ParseFlags(int argc, char** argv, const char* usage,
               const std::function<bool(const std::string& flag, const std::string& value)>& set) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "%s needs a value\n%s", flag.c_str(), usage);
      return 2;
    }
    const std::string value = argv[i + 1];
    if (!set(flag, value)) {
      fprintf(stderr, "unknown flag or value: %s %s\n%s", flag.c_str(), value.c_str(), usage);
      return 2;
    }
  }
  return -1;
}

}  // namespace tide::bench
