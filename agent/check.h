// `tide agent check`: what isolation this host supports for jobs, and why.
#pragma once

#include <string>
#include <vector>

namespace tide::agent {

struct CheckItem {
  std::string name;    // "cgroups", "user namespaces", ...
  bool ok = false;
  std::string detail;  // what was found, or why not
};

// Probes the host (makes and removes a test cgroup, forks to try
// namespaces); changes nothing it does not undo.
std::vector<CheckItem> CheckHost();

// Prints CheckHost() as a table; returns the process exit code (0).
int RunAgentCheck();

}  // namespace tide::agent
