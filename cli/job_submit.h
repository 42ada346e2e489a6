// `tide submit`: the pure parts (flags into a spec), exposed for tests.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}

namespace tide::cli {

// Flags of `tide submit`; an empty string or nullopt means "not given".
struct SubmitFlags {
  std::string name;
  std::string image;
  std::optional<int> gpus;   // per node
  std::optional<int> nodes;  // a multi-node (gang) job
  std::string gpu_type;    // "A100" or "A100,H100"
  std::string gpu_memory;  // "24GB"
  std::optional<double> cpus;
  std::string memory;             // "64GB"
  std::string max_runtime;        // "2h"
  std::string grace;              // "30s"
  std::string tier;               // "on-demand" or "spot"
  bool spot = false;              // --spot: tier spot
  std::optional<int> priority;    // -1000..1000
  std::vector<std::string> constraints;  // "KEY=VALUE" node labels
  std::optional<double> max_cost;   // credits, the whole job
  std::optional<double> max_price;  // credits per GPU-hour
  std::string depends_on;  // "afterok:ID[:ID],afterany:ID" or "ID" (afterok)
  std::optional<int> retry_times;
  bool network = false;  // --network: outbound network for the job
  std::vector<std::string> env;   // "K=V", or "K" to copy K from this environment
  std::vector<std::string> secrets;  // the same, into the spec's secrets
  std::vector<std::string> tags;  // added to the spec's tags
  std::vector<std::string> command;
  std::string code;  // id of the uploaded code archive
};

// "K=V" -> {K, V}. "K" alone takes K's value from this process's
// environment (as `docker run -e K` does) and fails if K is unset. Errors
// name `flag`; for "--secret" they never repeat the value.
Result<std::pair<std::string, std::string>> ParseEnvAssignment(std::string_view text,
                                                               std::string_view flag = "--env");

// Writes the flags over `spec` (a spec file's JSON, or {}): scalars replace,
// env merges by key, tags are appended without duplicates. `set_fields`, if
// given, receives the field paths the flags wrote ("resources.gpu_count").
// Fails, naming the field, when the spec holds something of the wrong shape
// where a flag must write (e.g. "resources" that is not a mapping).
Status MergeSubmitFlags(const SubmitFlags& flags, nlohmann::json* spec,
                        std::vector<std::string>* set_fields = nullptr);

// The job-shaping flags of `tide submit` (all of SubmitFlags but name,
// command and code), on `cmd`; `tide batch submit` takes them too, for its
// template.
void AddJobFlags(CLI::App* cmd, std::shared_ptr<SubmitFlags> flags);

}  // namespace tide::cli
