#include "agent/runtime/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"

namespace tide::agent {
namespace {

// Reads a small /proc file whole; "" on error.
std::string ReadProcFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break;  // environ is bounded by ARG_MAX anyway
  }
  ::close(fd);
  return out;
}

bool IsNumber(const char* s) {
  if (*s == '\0') return false;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return false;
  }
  return true;
}

}  // namespace

bool ParseProcStat(const std::string& stat, ProcInfo* out) {
  // "PID (COMM) STATE PPID PGRP SESSION ..."; COMM may hold spaces and ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  out->pid = static_cast<pid_t>(std::atoi(stat.c_str()));
  const char* p = stat.c_str() + close + 2;
  out->state = *p;
  char* end = nullptr;
  out->ppid = static_cast<pid_t>(std::strtol(p + 1, &end, 10));
  out->pgrp = static_cast<pid_t>(std::strtol(end, &end, 10));
  out->session = static_cast<pid_t>(std::strtol(end, &end, 10));
  // Fields 7 to 21, then starttime (22).
  for (int field = 7; field <= 21; ++field) std::strtoll(end, &end, 10);
  out->start_time = std::strtoull(end, &end, 10);
  return out->pid > 0;
}

bool ReadProcInfo(pid_t pid, ProcInfo* out) {
  return ParseProcStat(ReadProcFile("/proc/" + std::to_string(pid) + "/stat"), out);
}

std::vector<ProcInfo> ListProcesses() {
  std::vector<ProcInfo> procs;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return procs;
  while (struct dirent* e = ::readdir(dir)) {
    if (!IsNumber(e->d_name)) continue;
    std::string stat = ReadProcFile(std::string("/proc/") + e->d_name + "/stat");
    ProcInfo info;
    if (ParseProcStat(stat, &info)) procs.push_back(info);
  }
  ::closedir(dir);
  return procs;
}

bool EnvironHasAll(pid_t pid, const std::vector<std::string>& tag) {
  if (tag.empty()) return false;
  std::string env = ReadProcFile("/proc/" + std::to_string(pid) + "/environ");
  if (env.empty()) return false;
  std::set<std::string_view> entries;
  size_t start = 0;
  while (start < env.size()) {
    size_t end = env.find('\0', start);
    if (end == std::string::npos) end = env.size();
    entries.insert(std::string_view(env).substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& t : tag) {
    if (entries.count(t) == 0) return false;
  }
  return true;
}

std::vector<ProcInfo> FindJobProcesses(const std::vector<ProcInfo>& procs, pid_t leader,
                                       const std::vector<std::string>& tag, pid_t self) {
  std::map<pid_t, const ProcInfo*> by_pid;
  std::multimap<pid_t, pid_t> children;
  for (const ProcInfo& p : procs) {
    by_pid[p.pid] = &p;
    children.emplace(p.ppid, p.pid);
  }
  // Never touch ourselves, our ancestors, init or kthreadd's family.
  std::set<pid_t> protected_pids = {0, 1, 2, self};
  for (pid_t p = self; p > 1;) {
    auto it = by_pid.find(p);
    if (it == by_pid.end()) break;
    p = it->second->ppid;
    protected_pids.insert(p);
  }

  // Memoised "self is an ancestor" over the ppid chains.
  std::map<pid_t, bool> below;
  std::function<bool(pid_t)> below_self = [&](pid_t pid) -> bool {
    auto it = by_pid.find(pid);
    if (it == by_pid.end() || pid <= 1) return false;
    pid_t parent = it->second->ppid;
    if (parent == self) return true;
    if (auto m = below.find(pid); m != below.end()) return m->second;
    below[pid] = false;  // guards against ppid cycles while the table was read
    return below[pid] = below_self(parent);
  };

  std::set<pid_t> members;
  std::vector<pid_t> frontier;
  auto add = [&](pid_t pid) {
    if (protected_pids.count(pid) == 0 && members.insert(pid).second) frontier.push_back(pid);
  };
  if (by_pid.count(leader) != 0) add(leader);
  for (const ProcInfo& p : procs) {
    if (p.ppid == 2 || p.pid == 2) continue;  // kernel threads
    if (p.pgrp == leader || p.session == leader) {
      add(p.pid);
    } else if (!tag.empty() && p.state != 'Z' && protected_pids.count(p.pid) == 0 &&
               (p.ppid == 1 || below_self(p.pid)) && EnvironHasAll(p.pid, tag)) {
      add(p.pid);
    }
  }
  while (!frontier.empty()) {
    pid_t pid = frontier.back();
    frontier.pop_back();
    auto [lo, hi] = children.equal_range(pid);
    for (auto it = lo; it != hi; ++it) add(it->second);
  }

  std::vector<ProcInfo> out;
  for (pid_t pid : members) out.push_back(*by_pid[pid]);
  return out;
}

std::vector<pid_t> ListOwnChildren() {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (struct dirent* e = ::readdir(dir)) {
    if (!IsNumber(e->d_name)) continue;
    std::string list = ReadProcFile(std::string("/proc/self/task/") + e->d_name + "/children");
    const char* p = list.c_str();
    char* end = nullptr;
    for (;;) {
      long v = std::strtol(p, &end, 10);
      if (end == p) break;
      out.push_back(static_cast<pid_t>(v));
      p = end;
    }
  }
  ::closedir(dir);
  return out;
}

UidProbe ProbeUid(pid_t pid, uid_t uid) {
  UidProbe p;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("State:", 0) == 0) {
      size_t at = line.find_first_not_of(" \t", 6);
      p.zombie = at != std::string::npos && (line[at] == 'Z' || line[at] == 'X');
    } else if (line.rfind("PPid:", 0) == 0) {
      p.ppid = static_cast<pid_t>(std::atol(line.c_str() + 5));
    } else if (line.rfind("Uid:", 0) == 0) {
      std::istringstream fields(line.substr(4));
      uint64_t v;
      while (fields >> v) p.runs_as = p.runs_as || v == uid;
      break;
    }
  }
  return p;
}

bool ReapChildOfUid(pid_t pid, uid_t uid, int64_t deadline_ms) {
  for (;;) {
    const UidProbe p = ProbeUid(pid, uid);
    if (!p.runs_as || p.ppid != ::getpid()) return true;  // gone, reaped, or not ours
    if (p.zombie) {
      ::waitpid(pid, nullptr, WNOHANG);
      return true;
    }
    if (SystemClock::Default()->MonotonicMs() >= deadline_ms) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ReapChildrenOfUid(uid_t uid, int64_t deadline_ms) {
  for (pid_t kid : ListOwnChildren()) (void)ReapChildOfUid(kid, uid, deadline_ms);
}

}  // namespace tide::agent

namespace tide::agent {

bool IsDescendantOf(const std::vector<ProcInfo>& procs, pid_t pid, pid_t ancestor) {
  std::map<pid_t, pid_t> parent;
  for (const ProcInfo& p : procs) parent[p.pid] = p.ppid;
  for (int depth = 0; depth < 4096; ++depth) {
    auto it = parent.find(pid);
    if (it == parent.end() || it->second <= 0) return false;
    if (it->second == ancestor) return true;
    pid = it->second;
  }
  return false;
}

}  // namespace tide::agent
