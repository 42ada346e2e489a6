// OciRuntime: jobs run in OCI containers, with runc, over an image the
// provider prepared (`tide agent --runtime oci --image NAME=ROOTFS`). A job
// selects one with `image: NAME`; the agent advertises the names, and the
// scheduler places the job only where its image is offered.
//
// Each attempt is a container of its own:
//   - the image's root filesystem, read-only, through an overlay whose upper
//     layer is the container's (so the image is never written, and mount
//     points for the job's directories need no change to it);
//   - the job's work, output, checkpoint and metrics paths bound read-write
//     at their host paths (the TIDE_* variables hold), its control dir
//     read-only, a private /tmp, /var/tmp, /run and /dev/shm;
//   - as a uid of its own from the same range and claims as the sandbox
//     (UidPool), without capabilities, with no_new_privileges, under the
//     job seccomp filter, in new pid, mount, ipc, uts and cgroup namespaces
//     and a net namespace with only loopback unless `network: true`;
//   - only the device nodes of its GPUs (created and allowed by runc);
//   - tide-init (oci_init.cc) as pid 1, so the container dies with runc and
//     runc with the agent;
//   - in the job's cgroup: runc runs in it, and its own cgroup nests below
//     it (v1) or is the job's cgroup itself (v2), so the job's limits hold.
// Containers, mounts and bundles a dead agent left are removed when the
// next one starts.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/runtime/cgroup.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/runtime.h"
#include "agent/runtime/sandbox.h"

namespace tide::agent {

// Parses `--image NAME=ROOTFS` flags: NAME a valid image name other than
// "host", ROOTFS an absolute directory. The error names the flag.
Result<std::map<std::string, std::string>> ParseOciImages(const std::vector<std::string>& flags);

// A device node of the container: its path inside and what runc creates.
struct OciDevice {
  std::string path;  // "/dev/nvidia0"
  char type = 'c';   // 'c' or 'b'
  int64_t major = 0;
  int64_t minor = 0;
};

// Everything one container needs.
struct OciPlan {
  uid_t uid = 0;
  std::string rootfs;  // the container's root (the overlay)
  std::string init;    // host path of tide-init, bound at kOciInitPath
  std::vector<std::string> args;  // the command, args[0] resolved in the image
  std::vector<std::string> env;   // "KEY=VALUE"
  std::string work_dir;
  std::vector<std::string> writable;
  std::vector<std::string> readable;
  std::vector<OciDevice> devices;
  bool network = false;
  std::string hostname;
  std::string cgroups_path;  // linux.cgroupsPath
  int oom_score_adj = 0;     // process.oomScoreAdj (JobOomScoreAdj)
};
inline constexpr const char* kOciInitPath = "/.tide/init";
// The OCI runtime spec (config.json) for `plan`.
nlohmann::json OciConfig(const OciPlan& plan);

// Finds `name` the way execvp would inside the image at `rootfs` (absolute
// links resolved inside it), or in the job's work dir for a relative path
// with a slash. The path as the container sees it; the error is for the user.
Result<std::string> ResolveInImage(const std::string& name, const std::string& path_var,
                                   const std::string& rootfs, const std::string& image,
                                   const std::string& work_dir);

struct OciOptions {
  std::string runc;  // path of runc; "" = looked up in PATH
  std::string init;  // path of tide-init; "" = next to this executable
  std::string state_dir;                      // runc's state and bundles (DATA_DIR/oci)
  std::map<std::string, std::string> images;  // name -> rootfs
  UidRange uids;
  std::string lock_dir = "/run/tide/job-uids";
  std::string gpu_dev_root = "/dev";
};

class OciRuntime final : public Runtime {
 public:
  // Checks runc, tide-init, overlayfs and the images, and removes what a
  // dead agent left in state_dir. `cgroups` (not owned, may be null) places
  // each container in its job's cgroup.
  static Result<std::unique_ptr<OciRuntime>> Create(OciOptions options, ProcessRuntime* processes,
                                                    const CgroupManager* cgroups);

  // Claims a uid, mounts the overlay, writes the bundle and starts
  // `runc run` in the job's cgroup. A command the image lacks is a start
  // failure; nothing is left behind on any failure.
  Result<std::unique_ptr<Process>> Start(const LaunchSpec& spec) override;

  const OciOptions& options() const { return options_; }
  std::string RuncVersion() const { return runc_version_; }

 private:
  OciRuntime(OciOptions options, ProcessRuntime* processes, const CgroupManager* cgroups);
  void RemoveStale();

  OciOptions options_;
  ProcessRuntime* processes_;
  const CgroupManager* cgroups_;
  UidPool uids_;
  std::string runc_version_;
};

}  // namespace tide::agent
