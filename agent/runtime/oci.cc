#include "agent/runtime/oci.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/types.h"
#include "common/log.h"

namespace tide::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string Errno(int e) { return std::strerror(e); }

// Runs a tool (runc) to its end, at most `timeout_ms`; its stdout and stderr.
Result<std::string> RunTool(const std::vector<std::string>& argv, int64_t timeout_ms = 30'000) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::Internal("pipe: " + Errno(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::Internal("fork: " + Errno(errno));
  }
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(out[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + ": " +
                            (text.empty() ? "failed" : text));
  }
  return text;
}

// Whether `path` (absolute, inside the tree at `root_fd`) is an executable
// regular file there, resolving every link inside the tree.
int OpenInRoot(int root_fd, const std::string& rel, int flags);

bool ExecutableInRoot(int root_fd, const std::string& path) {
  const size_t start = path.find_first_not_of('/');
  if (start == std::string::npos) return false;  // "/" is no program
  int fd = OpenInRoot(root_fd, path.substr(start), O_PATH);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
  ::close(fd);
  return ok;
}

int OpenInRoot(int root_fd, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

// Makes `rel` ("var/tmp") in the container's root a directory anyone may
// write to (1777): runc gives a tmpfs the mode of its mount point, and an
// image may lack the directory. It lands in the overlay's upper layer, and
// every link is resolved inside the root.
void MakeStickyDir(int root_fd, const std::string& rel) {
  std::string sofar;
  for (size_t at = 0; at <= rel.size();) {
    size_t slash = rel.find('/', at);
    if (slash == std::string::npos) slash = rel.size();
    std::string parent = sofar.empty() ? "." : sofar;
    std::string name = rel.substr(at, slash - at);
    int pfd = OpenInRoot(root_fd, parent, O_PATH | O_DIRECTORY);
    if (pfd < 0) return;
    ::mkdirat(pfd, name.c_str(), 0755);
    ::close(pfd);
    sofar = sofar.empty() ? name : sofar + "/" + name;
    at = slash + 1;
  }
  int fd = OpenInRoot(root_fd, rel, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fchmod(fd, 01777);
  ::close(fd);
}

json Mount(const std::string& dest, const std::string& type, const std::string& source,
           std::vector<std::string> options) {
  return {{"destination", dest}, {"type", type}, {"source", source}, {"options", std::move(options)}};
}

}  // namespace

// ---------------------------------------------------------------- images

Result<std::map<std::string, std::string>> ParseOciImages(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> images;
  for (const std::string& flag : flags) {
    size_t eq = flag.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("--image: want NAME=ROOTFS, got \"" + flag + "\"", "image");
    }
    std::string name = flag.substr(0, eq);
    std::string dir = flag.substr(eq + 1);
    if (std::string why = api::CheckImageName(name); !why.empty()) {
      return Status::InvalidArgument("--image " + flag + ": " + why, "image");
    }
    if (name == "host") {
      return Status::InvalidArgument(
          "--image host=...: \"host\" is the host's own filesystem (--runtime sandbox), not an image",
          "image");
    }
    if (dir.empty() || dir[0] != '/') {
      return Status::InvalidArgument("--image " + flag + ": ROOTFS must be an absolute path", "image");
    }
    // overlayfs takes its layers in a comma- and colon-separated option.
    if (dir.find_first_of(",:") != std::string::npos) {
      return Status::InvalidArgument("--image " + flag + ": ROOTFS may not hold ',' or ':'", "image");
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("--image " + flag + ": " + dir + " is not a directory", "image");
    }
    if (!images.emplace(name, fs::path(dir).lexically_normal().string()).second) {
      return Status::InvalidArgument("--image: " + name + " given twice", "image");
    }
  }
  return images;
}

Result<std::string> ResolveInImage(const std::string& name, const std::string& path_var,
                                   const std::string& rootfs, const std::string& image,
                                   const std::string& work_dir) {
  if (name.empty()) return Status::InvalidArgument("empty command", "command");
  if (name.find('/') != std::string::npos && name[0] != '/') {
    // ./train.sh: the job's own directories are the host's.
    return ResolveJobProgram(name, path_var, work_dir);
  }
  int root = ::open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return Status::Internal("open image " + rootfs + ": " + Errno(errno));
  std::string found;
  if (name[0] == '/') {
    if (ExecutableInRoot(root, name)) found = name;
  } else {
    size_t start = 0;
    while (found.empty() && start <= path_var.size()) {
      size_t end = path_var.find(':', start);
      if (end == std::string::npos) end = path_var.size();
      std::string dir = path_var.substr(start, end - start);
      start = end + 1;
      if (!dir.empty() && dir[0] == '/' && ExecutableInRoot(root, dir + "/" + name)) {
        found = dir + "/" + name;
      }
    }
  }
  ::close(root);
  if (found.empty()) {
    return Status::NotFound(name + ": command not found in image \"" + image + "\" (PATH=" +
                            path_var + ")");
  }
  return found;
}

// ---------------------------------------------------------------- config

json OciConfig(const OciPlan& plan) {
  json process = {
      {"terminal", false},
      {"user", {{"uid", plan.uid}, {"gid", plan.uid}}},
      {"args", json::array({kOciInitPath})},
      {"env", plan.env},
      {"cwd", plan.work_dir},
      {"noNewPrivileges", true},
      {"oomScoreAdj", plan.oom_score_adj},
      {"rlimits", json::array({{{"type", "RLIMIT_CORE"}, {"hard", 0}, {"soft", 0}}})},
      {"capabilities",
       {{"bounding", json::array()},
        {"effective", json::array()},
        {"inheritable", json::array()},
        {"permitted", json::array()},
        {"ambient", json::array()}}},
  };
  for (const std::string& a : plan.args) process["args"].push_back(a);

  json mounts = json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777"}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      Mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777"}),
      Mount("/var/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777"}),
      Mount("/run", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=755"}),
      Mount(kOciInitPath, "bind", plan.init, {"bind", "ro", "nosuid", "nodev"}),
  });
  for (const std::string& p : plan.readable) {
    mounts.push_back(Mount(p, "bind", p, {"rbind", "ro", "nosuid", "nodev"}));
  }
  for (const std::string& p : plan.writable) {
    mounts.push_back(Mount(p, "bind", p, {"rbind", "rw", "nosuid", "nodev"}));
  }
  if (plan.network) {
    // What the host resolves names with, as the sandbox's shared /etc.
    for (const char* f : {"/etc/resolv.conf", "/etc/hosts"}) {
      if (::access(f, R_OK) == 0) mounts.push_back(Mount(f, "bind", f, {"bind", "ro", "nosuid", "nodev"}));
    }
  }

  json namespaces = json::array();
  for (const char* ns : {"pid", "ipc", "uts", "mount", "cgroup"}) namespaces.push_back({{"type", ns}});
  if (!plan.network) namespaces.push_back({{"type", "network"}});

  json devices = json::array();
  json rules = json::array({{{"allow", false}, {"access", "rwm"}}});  // runc adds its defaults
  for (const OciDevice& d : plan.devices) {
    std::string type(1, d.type);
    devices.push_back({{"path", d.path}, {"type", type}, {"major", d.major}, {"minor", d.minor},
                       {"fileMode", 0666}, {"uid", 0}, {"gid", 0}});
    rules.push_back({{"allow", true}, {"type", type}, {"major", d.major}, {"minor", d.minor},
                     {"access", "rwm"}});
  }

  // The sandbox's filter, as data for runc.
  constexpr int kEperm = EPERM;
  json syscalls = json::array();
  syscalls.push_back({{"names", kJobRefusedSyscalls}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", kEperm}});
  for (uint64_t flag : kJobRefusedCloneFlags) {
    syscalls.push_back({{"names", {"clone"}},
                        {"action", "SCMP_ACT_ERRNO"},
                        {"errnoRet", kEperm},
                        {"args", {{{"index", 0}, {"value", flag}, {"valueTwo", flag}, {"op", "SCMP_CMP_MASKED_EQ"}}}}});
  }
  syscalls.push_back({{"names", {"clone3"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", ENOSYS}});
  syscalls.push_back({{"names", {"ioctl"}},
                      {"action", "SCMP_ACT_ERRNO"},
                      {"errnoRet", kEperm},
                      {"args", {{{"index", 1}, {"value", 0xffffffffu}, {"valueTwo", TIOCSTI},
                                 {"op", "SCMP_CMP_MASKED_EQ"}}}}});

  json linux = {
      {"namespaces", namespaces},
      {"devices", devices},
      {"resources", {{"devices", rules}}},
      {"seccomp", {{"defaultAction", "SCMP_ACT_ALLOW"}, {"syscalls", syscalls}}},
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"}},
      {"readonlyPaths",
       {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
  };
  if (!plan.cgroups_path.empty()) linux["cgroupsPath"] = plan.cgroups_path;

  return {
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", plan.rootfs}, {"readonly", true}}},
      {"hostname", plan.hostname.empty() ? std::string("tide-job") : plan.hostname},
      {"mounts", mounts},
      {"linux", linux},
  };
}

// ---------------------------------------------------------------- runtime

namespace {

// What one container holds on the host: runc's state, the overlay, the
// bundle directory. Released once, however the job ended.
class Container {
 public:
  // `mounted`: the overlay may be mounted (a container a dead agent left).
  Container(std::string runc, std::string runc_root, std::string id, std::string bundle,
            bool mounted = false)
      : runc_(std::move(runc)), root_(std::move(runc_root)), id_(std::move(id)),
        bundle_(std::move(bundle)), mounted_(mounted) {}
  ~Container() { Release(); }
  const std::string& id() const { return id_; }
  const std::string& bundle() const { return bundle_; }
  std::string rootfs() const { return bundle_ + "/rootfs"; }

  Status Mount(const std::string& image) {
    for (const char* d : {"upper", "work", "rootfs"}) {
      std::error_code ec;
      fs::create_directories(bundle_ + "/" + d, ec);
      if (ec) return Status::Internal("create " + bundle_ + "/" + d + ": " + ec.message());
    }
    std::string opts = "lowerdir=" + image + ",upperdir=" + bundle_ + "/upper,workdir=" + bundle_ +
                       "/work";
    if (::mount("overlay", rootfs().c_str(), "overlay", MS_NODEV | MS_NOSUID, opts.c_str()) != 0) {
      return Status::Internal("mount the overlay of " + image + ": " + Errno(errno));
    }
    mounted_ = true;
    int root = ::open(rootfs().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return Status::Internal("open " + rootfs() + ": " + Errno(errno));
    for (const char* d : {"tmp", "var/tmp"}) MakeStickyDir(root, d);
    ::close(root);
    return Status::Ok();
  }

  void Release() {
    if (released_) return;
    released_ = true;
    // Kills what runc still knows of and removes its state and cgroups.
    Result<std::string> out = RunTool({runc_, "--root", root_, "delete", "--force", id_});
    if (!out.ok() && out.status().message().find("does not exist") == std::string::npos) {
      spdlog::warn("container {}: {}", id_, out.status().ToString());
    }
    if (mounted_ && ::umount2(rootfs().c_str(), MNT_DETACH) != 0 && errno != EINVAL &&
        errno != ENOENT) {
      spdlog::warn("container {}: umount {}: {}", id_, rootfs(), Errno(errno));
    }
    std::error_code ec;
    fs::remove_all(bundle_, ec);
    if (ec) spdlog::warn("container {}: remove {}: {}", id_, bundle_, ec.message());
  }

 private:
  std::string runc_, root_, id_, bundle_;
  bool mounted_ = false;
  bool released_ = false;
};

std::atomic<uint64_t> g_container_seq{0};

}  // namespace

OciRuntime::OciRuntime(OciOptions options, ProcessRuntime* processes, const CgroupManager* cgroups)
    : options_(std::move(options)), processes_(processes), cgroups_(cgroups),
      uids_(options_.uids, options_.lock_dir) {}

Result<std::unique_ptr<OciRuntime>> OciRuntime::Create(OciOptions options, ProcessRuntime* processes,
                                                       const CgroupManager* cgroups) {
  if (options.runc.empty()) {
    const char* path = std::getenv("PATH");
    auto found = ResolveProgram("runc", path != nullptr ? path : kDefaultPath, "/");
    if (found.ok()) options.runc = *found;
  }
  if (options.runc.empty() || ::access(options.runc.c_str(), X_OK) != 0) {
    return Status::Unavailable("the oci runtime needs runc (Debian package runc): runc not found");
  }
  if (options.init.empty()) {
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) options.init = (self.parent_path() / "tide-init").string();
  }
  if (options.init.empty() || ::access(options.init.c_str(), X_OK) != 0) {
    return Status::Unavailable("the oci runtime needs tide-init next to the tide binary (" +
                               options.init + " not found)");
  }
  if (::geteuid() != 0) {
    return Status::Unavailable("the oci runtime starts containers with runc, which needs root");
  }
  if (options.images.empty()) {
    return Status::InvalidArgument("--runtime oci: no images; give at least one --image NAME=ROOTFS",
                                   "image");
  }
  if (options.uids.first == 0) return Status::InvalidArgument("--job-uids: no range given");
  {
    std::ifstream fss("/proc/filesystems");
    std::string all((std::istreambuf_iterator<char>(fss)), std::istreambuf_iterator<char>());
    if (all.find("\toverlay\n") == std::string::npos) {
      return Status::Unavailable("the oci runtime needs overlayfs (modprobe overlay)");
    }
  }
  std::error_code ec;
  for (const std::string& d : {options.state_dir, options.state_dir + "/runc", options.lock_dir}) {
    fs::create_directories(d, ec);
    if (ec) return Status::Internal("create " + d + ": " + ec.message());
    ::chmod(d.c_str(), 0700);
  }
  Result<std::string> version = RunTool({options.runc, "--version"});
  if (!version.ok()) return version.status().WithContext("runc");
  auto rt = std::unique_ptr<OciRuntime>(new OciRuntime(std::move(options), processes, cgroups));
  rt->runc_version_ = version->substr(0, version->find('\n'));
  rt->RemoveStale();
  return rt;
}

void OciRuntime::RemoveStale() {
  const std::string root = options_.state_dir + "/runc";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.state_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "runc" || !e.is_directory()) continue;
    spdlog::warn("removing container {} left by an earlier agent", name);
    Container(options_.runc, root, name, e.path().string(), /*mounted=*/true).Release();
  }
  // State of containers whose bundle went first.
  for (const auto& e : fs::directory_iterator(root, ec)) {
    Result<std::string> out =
        RunTool({options_.runc, "--root", root, "delete", "--force", e.path().filename().string()});
    if (!out.ok()) spdlog::warn("{}", out.status().ToString());
  }
}

Result<std::unique_ptr<Process>> OciRuntime::Start(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("empty command", "command");
  auto image = options_.images.find(spec.image);
  if (image == options_.images.end()) {
    return Status::InvalidArgument("image \"" + spec.image + "\" is not offered by this agent", "image");
  }
  std::map<std::string, std::string> env = spec.env;
  env.try_emplace("PATH", kDefaultPath);
  env.try_emplace("HOME", spec.work_dir);
  env.try_emplace("LANG", "C.UTF-8");
  Result<std::string> program =
      ResolveInImage(spec.argv[0], env["PATH"], image->second, image->first, spec.work_dir);
  if (!program.ok()) return program.status();

  Result<std::unique_ptr<UidLease>> lease = uids_.Claim();
  if (!lease.ok()) return lease.status();
  const uid_t uid = (*lease)->uid();

  std::string id = "tide-" + std::to_string(::getpid()) + "-" +
                   (spec.cgroup_key.empty() ? std::to_string(++g_container_seq) : spec.cgroup_key);
  // It names the bundle and overlay directories: one path component.
  if (id.size() > 200 || id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789-_.") != std::string::npos) {
    return Status::InvalidArgument("bad container name \"" + id + "\"");
  }
  auto container = std::make_unique<Container>(options_.runc, options_.state_dir + "/runc", id,
                                               options_.state_dir + "/" + id);
  TIDE_RETURN_IF_ERROR(container->Mount(image->second));

  OciPlan plan;
  plan.uid = uid;
  plan.rootfs = container->rootfs();
  plan.init = options_.init;
  plan.args = spec.argv;
  plan.args[0] = *program;
  for (const auto& [k, v] : env) plan.env.push_back(k + "=" + v);
  plan.work_dir = spec.work_dir;
  plan.writable = spec.writable;
  plan.readable = spec.readable;
  plan.network = spec.network;
  plan.hostname = spec.hostname;
  plan.oom_score_adj = JobOomScoreAdj();
  for (const std::string& dev : spec.devices) {
    struct stat st {};
    if (::stat((options_.gpu_dev_root + "/" + dev).c_str(), &st) != 0) continue;
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) continue;
    plan.devices.push_back({"/dev/" + dev, S_ISCHR(st.st_mode) ? 'c' : 'b',
                            static_cast<int64_t>(major(st.st_rdev)),
                            static_cast<int64_t>(minor(st.st_rdev))});
  }
  // runc runs in the job's cgroup. v1: a relative path nests below runc's
  // own cgroup in each hierarchy, whatever its depth. v2: runc's relative
  // paths go beside its cgroup, so it is given the job's cgroup itself.
  if (cgroups_ != nullptr && cgroups_->layout().v2_limits() && !spec.cgroup_key.empty()) {
    plan.cgroups_path = cgroups_->V2Path(spec.cgroup_key);
  } else {
    plan.cgroups_path = id;
  }
  for (const std::string& p : spec.writable) TIDE_RETURN_IF_ERROR(GiveTree(p, uid));

  {
    const std::string path = container->bundle() + "/config.json";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return Status::Internal("create " + path + ": " + Errno(errno));
    std::string text = OciConfig(plan).dump(2);
    ssize_t w = ::write(fd, text.data(), text.size());
    ::close(fd);
    if (w != static_cast<ssize_t>(text.size())) return Status::Internal("write " + path);
  }

  LaunchSpec outer;
  outer.argv = {options_.runc, "--root", options_.state_dir + "/runc", "run", "--bundle",
                container->bundle(), id};
  outer.env = {{"PATH", kDefaultPath}};
  outer.work_dir = container->bundle();
  outer.output_fd = spec.output_fd;
  outer.tag = spec.tag;
  outer.cgroup_key = spec.cgroup_key;
  outer.limits = spec.limits;
  Result<std::unique_ptr<Process>> started = processes_->Start(outer);
  if (!started.ok()) return started.status();
  // `runc run` leads the tree; the container is released with the tree.
  std::shared_ptr<Container> held = std::move(container);
  return std::unique_ptr<Process>(new UidJobProcess(std::move(*started), std::move(*lease),
                                                    "container job", [held] { held->Release(); }));
}

}  // namespace tide::agent
