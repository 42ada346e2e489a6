#include "agent/testing/job_spec.h"

#include <filesystem>

namespace tide::agent::testing {

LaunchSpec JobSpec(const std::string& data_dir, const std::string& id, const std::string& script) {
  const std::string root = data_dir + "/jobs/" + id + "/1";
  for (const char* d : {"work", "output", "control"}) std::filesystem::create_directories(root + "/" + d);
  LaunchSpec spec;
  spec.argv = {"sh", "-c", script};
  spec.work_dir = root + "/work";
  spec.env = {{"TIDE_JOB_ID", id}};
  spec.tag = {"TIDE_JOB_ID=" + id};
  spec.writable = {root + "/work", root + "/output"};
  spec.readable = {root + "/control"};
  spec.cgroup_key = id;
  spec.limits.pids = 256;
  return spec;
}

}  // namespace tide::agent::testing
