#include "agent/runtime/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/job_cpu.h"
#include "common/log.h"
#include "common/paths.h"

namespace tide::agent {
namespace fs = std::filesystem;

namespace {

// The v1 controllers a job's cgroup uses.
const char* const kV1Controllers[] = {"memory", "cpu", "pids", "freezer"};

Status WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  if (!out) return Status::Internal("open " + path + ": " + std::strerror(errno));
  out << value;
  out.flush();
  if (!out) return Status::Internal("write \"" + value + "\" to " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

std::string ReadValue(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : "";
}

// "key value" lines (memory.events, cpu.stat, memory.oom_control).
int64_t Field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal("create cgroup " + dir + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

bool IsSafeKey(const std::string& key) {
  if (key.empty() || key.size() > 200 || key[0] == '.') return false;
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// The members of `dir` and of every cgroup below it: a job owns its
// directory and may make sub-cgroups in it.
std::vector<pid_t> ReadPids(const std::string& dir) {
  std::vector<pid_t> out;
  std::istringstream in(ReadValue(dir + "/cgroup.procs"));
  pid_t p;
  while (in >> p) {
    if (p > 0) out.push_back(p);  // 0: a process outside our pid namespace
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) continue;
    for (pid_t q : ReadPids(e.path().string())) out.push_back(q);
  }
  return out;
}

// Removes `dir` and the cgroups below it, deepest first (only empty
// cgroups can be removed).
void RemoveTree(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) RemoveTree(e.path().string());
  }
  ::rmdir(dir.c_str());
}

// SIGKILLs everything in `dir` and below until it is empty: with
// cgroup.kill (which takes the sub-cgroups too) where there is one.
bool KillAll(const std::string& dir, const std::string& freezer) {
  const bool has_kill = fs::exists(dir + "/cgroup.kill");
  for (int round = 0; round < 200; ++round) {
    std::vector<pid_t> pids = ReadPids(dir);
    if (pids.empty()) return true;
    if (has_kill) {
      (void)WriteValue(dir + "/cgroup.kill", "1");
    } else {
      // Frozen, nothing can fork between reading the members and killing
      // them; SIGKILL reaches frozen tasks once they are thawed.
      if (!freezer.empty()) (void)WriteValue(freezer + "/freezer.state", "FROZEN");
      for (pid_t p : ReadPids(dir)) ::kill(p, SIGKILL);
      if (!freezer.empty()) (void)WriteValue(freezer + "/freezer.state", "THAWED");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 20 ? 5 : 50));
  }
  return false;
}

}  // namespace

std::vector<std::string> CgroupLayout::v2_limit_controllers() const {
  std::vector<std::string> out;
  if (v2_dir.empty()) return out;
  for (const char* c : {"memory", "cpu", "pids"}) {
    if (v1_dirs.count(c)) return {};  // the limits live in v1
    if (v2_controllers.count(c)) out.push_back(c);
  }
  return out;
}

bool CgroupLayout::v2_limits() const { return !v2_limit_controllers().empty(); }

std::string CgroupLayout::Describe() const {
  std::string out;
  if (v2_limits()) {
    std::vector<std::string> have = v2_limit_controllers();
    std::string list, missing;
    for (const std::string& c : have) list += (list.empty() ? "" : ", ") + c;
    for (const char* c : {"memory", "cpu", "pids"}) {
      if (std::find(have.begin(), have.end(), c) == have.end()) {
        missing += std::string(missing.empty() ? "" : ", ") + c;
      }
    }
    out = "cgroup v2 at " + v2_dir + " (" + list + " limits; cgroup.kill)";
    if (!missing.empty()) {
      out += "; not delegated to the agent: " + missing +
             " (those limits are not enforced; e.g. systemd Delegate=yes)";
    }
  } else {
    std::string v1;
    for (const auto& [c, d] : v1_dirs) v1 += (v1.empty() ? "" : ", ") + c;
    out = "hybrid cgroups: v1 " + (v1.empty() ? std::string("none") : v1) + "; v2 " +
          (v2_dir.empty() ? std::string("none") : v2_dir + " without controllers (cgroup.kill)");
  }
  return out;
}

Result<CgroupLayout> DetectCgroups(const std::string& proc_self, const std::string& root) {
  // Mount points: field 5 of mountinfo, the filesystem type after " - ",
  // and for v1 the controllers in the super options.
  // Mount point and the root of the hierarchy mounted there (not "/" in a
  // container that sees only its part of the host's tree).
  std::string v2_mount, v2_root;
  std::map<std::string, std::string> v1_mounts, v1_roots;
  {
    std::istringstream in(ReadValue(proc_self + "/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string id, parent, dev, rootdir, mount;
      f >> id >> parent >> dev >> rootdir >> mount;
      size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream tail(line.substr(dash + 3));
      std::string type, source, options;
      tail >> type >> source >> options;
      if (type == "cgroup2") {
        if (v2_mount.empty()) {
          v2_mount = mount;
          v2_root = rootdir;
        }
      } else if (type == "cgroup") {
        std::istringstream opts(options);
        std::string opt;
        while (std::getline(opts, opt, ',')) {
          for (const char* c : kV1Controllers) {
            if (opt == c && !v1_mounts.count(c)) {
              v1_mounts[c] = mount;
              v1_roots[c] = rootdir;
            }
          }
        }
      }
    }
  }
  CgroupLayout layout;
  // Our path in each: "0::/path" for v2, "N:ctrl[,ctrl]:/path" for v1.
  std::istringstream in(ReadValue(proc_self + "/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':');
    size_t b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string full = line.substr(b + 1);
    // Our path, seen from where the hierarchy is mounted.
    auto below = [&](const std::string& mount_root) {
      std::string path = full;
      if (mount_root != "/" && path.rfind(mount_root, 0) == 0) path = path.substr(mount_root.size());
      return path == "/" ? std::string() : path;
    };
    if (controllers.empty()) {
      if (!v2_mount.empty()) {
        layout.v2_mount = root + v2_mount;
        layout.v2_dir = layout.v2_mount + below(v2_root);
      }
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ',')) {
      auto m = v1_mounts.find(c);
      if (m != v1_mounts.end()) layout.v1_dirs[c] = root + m->second + below(v1_roots[c]);
    }
  }
  if (!layout.v2_dir.empty()) {
    std::istringstream cs(ReadValue(layout.v2_dir + "/cgroup.controllers"));
    std::string c;
    while (cs >> c) layout.v2_controllers.insert(c);
  }
  if (layout.v2_dir.empty() && layout.v1_dirs.empty()) {
    return Status::Unavailable("no cgroup hierarchy is mounted (" + proc_self + "/mountinfo)");
  }
  return layout;
}

// ------------------------------------------------------------------ manager

namespace {

// The smallest CPU quota of `dir` and its ancestors in a v1 cpu hierarchy,
// in µs per `period`; 0 when none has one.
int64_t V1CpuCap(const std::string& dir, int64_t period) {
  int64_t cap = 0;
  for (fs::path p(dir); fs::exists(p / "cpu.cfs_quota_us"); p = p.parent_path()) {
    const int64_t q = std::atoll(ReadValue((p / "cpu.cfs_quota_us").string()).c_str());
    const int64_t per = std::atoll(ReadValue((p / "cpu.cfs_period_us").string()).c_str());
    if (q > 0 && per > 0) {
      const int64_t scaled = q * period / per;
      if (cap == 0 || scaled < cap) cap = scaled;
    }
    if (p == p.parent_path()) break;
  }
  return cap;
}

}  // namespace

std::string CgroupManager::V2Path(const std::string& key) const {
  if (v2_base_.empty() || v2_base_.rfind(layout_.v2_mount, 0) != 0) return "";
  return v2_base_.substr(layout_.v2_mount.size()) + "/" + key;
}

Result<std::unique_ptr<CgroupManager>> CgroupManager::Create(const CgroupLayout& layout,
                                                             const std::string& name) {
  if (!IsSafeKey(name)) return Status::InvalidArgument("bad cgroup name \"" + name + "\"");
  std::unique_ptr<CgroupManager> m(new CgroupManager);
  m->layout_ = layout;
  if (!layout.v2_dir.empty()) {
    m->v2_base_ = layout.v2_dir + "/" + name;
    TIDE_RETURN_IF_ERROR(MakeDir(m->v2_base_));
    if (layout.v2_limits()) {
      // A cgroup with processes may not hand controllers to children: the
      // agent moves into its own leaf first, then both levels delegate.
      // Only when the agent is alone in its cgroup (a service's own): it
      // never moves what it does not own, and moves back if it fails.
      const std::string self = std::to_string(::getpid());
      std::vector<pid_t> others;
      {
        std::istringstream in(ReadValue(layout.v2_dir + "/cgroup.procs"));
        pid_t p;
        while (in >> p) {
          if (p != ::getpid()) others.push_back(p);
        }
      }
      if (!others.empty()) {
        ::rmdir(m->v2_base_.c_str());
        return Status::Unavailable(layout.v2_dir + " holds other processes than the agent, so it "
                                   "cannot hand its controllers to job cgroups; run the agent in "
                                   "a cgroup of its own (e.g. a systemd service with Delegate=yes)");
      }
      TIDE_RETURN_IF_ERROR(MakeDir(m->v2_base_ + "/agent"));
      TIDE_RETURN_IF_ERROR(WriteValue(m->v2_base_ + "/agent/cgroup.procs", self));
      m->moved_ = true;
      std::string enable;
      for (const std::string& c : layout.v2_limit_controllers()) {
        enable += (enable.empty() ? "+" : " +") + c;
      }
      for (const std::string& dir : {layout.v2_dir, m->v2_base_}) {
        Status st = WriteValue(dir + "/cgroup.subtree_control", enable);
        if (!st.ok()) {
          (void)WriteValue(layout.v2_dir + "/cgroup.procs", self);
          ::rmdir((m->v2_base_ + "/agent").c_str());
          ::rmdir(m->v2_base_.c_str());
          m->moved_ = false;
          return st;
        }
      }
    }
  }
  if (!layout.v2_limits()) {
    for (const char* c : kV1Controllers) {
      auto d = layout.v1_dirs.find(c);
      if (d == layout.v1_dirs.end()) continue;
      m->v1_base_[c] = d->second + "/" + name;
      TIDE_RETURN_IF_ERROR(MakeDir(m->v1_base_[c]));
      // Old kernels let a v1 memory cgroup ignore its parent's limit unless
      // asked: the job's limit must hold for what runc nests below it.
      const std::string hierarchy = m->v1_base_[c] + "/memory.use_hierarchy";
      if (std::string(c) == "memory" && ReadValue(hierarchy).rfind("0", 0) == 0) {
        TIDE_RETURN_IF_ERROR(WriteValue(hierarchy, "1"));
      }
    }
  }
  return m;
}

void CgroupManager::RemoveStale(const CgroupLayout& layout, const std::string& prefix) {
  std::vector<std::string> parents;
  if (!layout.v2_dir.empty()) parents.push_back(layout.v2_dir);
  for (const auto& [c, d] : layout.v1_dirs) parents.push_back(d);
  for (const std::string& parent : parents) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) != 0 || !entry.is_directory(ec)) continue;
      // `prefix`<pid>, or `prefix`<pid>-<n> for the n-th agent of a process.
      const std::string rest = name.substr(prefix.size());
      const std::string pid = rest.substr(0, rest.find('-'));
      const std::string seq = rest.size() > pid.size() ? rest.substr(pid.size() + 1) : "0";
      auto digits = [](const std::string& t) {
        return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!digits(pid) || !digits(seq)) continue;
      if (fs::exists("/proc/" + pid, ec)) continue;  // its agent still runs
      // Its jobs may have outlived it (children of a job do not get the
      // parent-death signal): nothing of theirs may run on.
      KillAll(entry.path().string(), "");
      RemoveTree(entry.path().string());
    }
  }
}

CgroupManager::~CgroupManager() {
  // Only empty directories go; a job cgroup still in use stays.
  if (!v2_base_.empty()) {
    if (moved_) ::rmdir((v2_base_ + "/agent").c_str());  // fails while the agent is in it
    ::rmdir(v2_base_.c_str());
  }
  for (const auto& [c, d] : v1_base_) ::rmdir(d.c_str());
}

Result<std::unique_ptr<JobCgroup>> CgroupManager::CreateJob(const std::string& key,
                                                            const CgroupLimits& limits) {
  if (!IsSafeKey(key)) return Status::InvalidArgument("bad cgroup name \"" + key + "\"");
  std::unique_ptr<JobCgroup> job(new JobCgroup);
  const int64_t period = 100'000;  // µs
  const int64_t quota = limits.cpus > 0 ? std::max<int64_t>(1000, std::llround(limits.cpus * period)) : 0;
  if (!v2_base_.empty()) {
    job->v2_ = v2_base_ + "/" + key;
    job->v2_limits_ = layout_.v2_limits();
    TIDE_RETURN_IF_ERROR(MakeDir(job->v2_));
    // Only the controllers delegated to the agent (Describe says which not).
    for (const std::string& c : layout_.v2_limit_controllers()) {
      if (c == "memory") {
        TIDE_RETURN_IF_ERROR(WriteValue(
            job->v2_ + "/memory.max", limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes) : "max"));
        // No swap: past the limit the job meets the OOM killer, not the disk.
        if (limits.memory_bytes > 0 && fs::exists(job->v2_ + "/memory.swap.max")) {
          TIDE_RETURN_IF_ERROR(WriteValue(job->v2_ + "/memory.swap.max", "0"));
        }
      } else if (c == "cpu") {
        TIDE_RETURN_IF_ERROR(WriteValue(job->v2_ + "/cpu.max", (quota > 0 ? std::to_string(quota) : "max") +
                                                                   " " + std::to_string(period)));
      } else if (c == "pids") {
        TIDE_RETURN_IF_ERROR(
            WriteValue(job->v2_ + "/pids.max", limits.pids > 0 ? std::to_string(limits.pids) : "max"));
      }
    }
  }
  for (const auto& [c, base] : v1_base_) {
    std::string dir = base + "/" + key;
    TIDE_RETURN_IF_ERROR(MakeDir(dir));
    job->v1_[c] = dir;
    if (c == "memory" && limits.memory_bytes > 0) {
      TIDE_RETURN_IF_ERROR(WriteValue(dir + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
      if (fs::exists(dir + "/memory.memsw.limit_in_bytes")) {
        TIDE_RETURN_IF_ERROR(
            WriteValue(dir + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)));
      }
      job->WatchOom(dir);
    } else if (c == "cpu" && quota > 0) {
      // v1 refuses a quota above an ancestor's: a job gets at most what
      // the agent's own cgroup has.
      int64_t q = quota;
      const int64_t cap = V1CpuCap(base, period);
      if (cap > 0 && cap < q) {
        spdlog::warn("job {}: {} CPUs asked, the agent's cgroup allows {:.2f}: capped", key,
                     limits.cpus, static_cast<double>(cap) / period);
        q = cap;
      }
      TIDE_RETURN_IF_ERROR(WriteValue(dir + "/cpu.cfs_period_us", std::to_string(period)));
      TIDE_RETURN_IF_ERROR(WriteValue(dir + "/cpu.cfs_quota_us", std::to_string(q)));
    } else if (c == "pids" && limits.pids > 0) {
      TIDE_RETURN_IF_ERROR(WriteValue(dir + "/pids.max", std::to_string(limits.pids)));
    }
  }
  return job;
}

// ------------------------------------------------------------------ one job

std::vector<std::string> JobCgroup::dirs() const {
  std::vector<std::string> out;
  if (!v2_.empty()) out.push_back(v2_);
  for (const auto& [c, d] : v1_) out.push_back(d);
  return out;
}

Status JobCgroup::Add(pid_t pid) {
  for (const std::string& dir : dirs()) {
    TIDE_RETURN_IF_ERROR(WriteValue(dir + "/cgroup.procs", std::to_string(pid)));
  }
  return Status::Ok();
}

Result<std::vector<int>> JobCgroup::OpenProcs() const {
  std::vector<int> fds;
  for (const std::string& dir : dirs()) {
    const std::string path = dir + "/cgroup.procs";
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      for (int f : fds) ::close(f);
      return Status::Internal("open " + path + ": " + std::strerror(e));
    }
    fds.push_back(fd);
  }
  return fds;
}

std::vector<pid_t> JobCgroup::Pids() const {
  // Every hierarchy holds the same processes; the v2 tree is the truth when
  // there is one.
  if (!v2_.empty()) return ReadPids(v2_);
  auto any = v1_.find("pids");
  if (any == v1_.end()) any = v1_.begin();
  return any == v1_.end() ? std::vector<pid_t>{} : ReadPids(any->second);
}

Status JobCgroup::Kill() {
  CpuPhase cpu(JobPhase::kCgroup);
  auto freezer = v1_.find("freezer");
  const std::string freezer_dir = freezer == v1_.end() ? "" : freezer->second;
  // The v2 tree when there is one, else the v1 pids (or any) hierarchy.
  std::string dir = v2_;
  if (dir.empty()) {
    auto any = v1_.find("pids");
    if (any == v1_.end()) any = v1_.begin();
    if (any == v1_.end()) return Status::Ok();
    dir = any->second;
  }
  if (KillAll(dir, freezer_dir)) return Status::Ok();
  return Status::Internal("processes of the job survive in " + dir + " after SIGKILL");
}

void JobCgroup::WatchOom(const std::string& dir) {
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int ofd = ::open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC);
  if (efd >= 0 && ofd >= 0 &&
      WriteValue(dir + "/cgroup.event_control", std::to_string(efd) + " " + std::to_string(ofd)).ok()) {
    oom_event_fd_ = efd;
    oom_control_fd_ = ofd;
    return;
  }
  if (efd >= 0) ::close(efd);
  if (ofd >= 0) ::close(ofd);
}

bool JobCgroup::OomKilled() const {
  if (!v2_.empty() && v2_limits_) return Field(ReadValue(v2_ + "/memory.events"), "oom_kill") > 0;
  auto m = v1_.find("memory");
  if (m == v1_.end()) return false;
  if (oom_event_fd_ >= 0) {
    uint64_t n = 0;
    if (::read(oom_event_fd_, &n, sizeof n) == sizeof n && n > 0) oom_seen_ = true;
    if (oom_seen_) return true;
  }
  // v1 counts a kill in the cgroup of the process killed, not in the one
  // whose limit was hit: look through the sub-cgroups (a container's).
  std::function<bool(const std::string&)> any = [&](const std::string& dir) {
    if (Field(ReadValue(dir + "/memory.oom_control"), "oom_kill") > 0) return true;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_directory(ec) && any(e.path().string())) return true;
    }
    return false;
  };
  return any(m->second);
}

Result<CpuThrottling> JobCgroup::Throttling() const {
  std::string text;
  CpuThrottling t;
  if (!v2_.empty() && v2_limits_) {
    text = ReadValue(v2_ + "/cpu.stat");
    t.throttled_usec = Field(text, "throttled_usec");
  } else if (auto c = v1_.find("cpu"); c != v1_.end()) {
    text = ReadValue(c->second + "/cpu.stat");
    t.throttled_usec = Field(text, "throttled_time") / 1000;  // ns
  } else {
    return Status::Unavailable("no cpu controller");
  }
  t.periods = Field(text, "nr_periods");
  t.throttled = Field(text, "nr_throttled");
  return t;
}

JobCgroup::~JobCgroup() {
  CpuPhase cpu(JobPhase::kCgroup);
  (void)Kill();
  if (oom_event_fd_ >= 0) ::close(oom_event_fd_);
  if (oom_control_fd_ >= 0) ::close(oom_control_fd_);
  for (const std::string& dir : dirs()) RemoveTree(dir);
}

}  // namespace tide::agent
