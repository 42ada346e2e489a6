// FakeGpuSource: GPUs described by a string, for machines without GPUs.
//
// Grammar: a comma-separated list of COUNTxMODEL:MEMORY, where COUNT is
// optional (1) and MEMORY is a size such as 24GB or 81920MB:
//   "4xRTX4090:24GB,2xA100:80GB"  ->  indices 0-3 RTX4090, 4-5 A100.
// UUIDs are derived from the node name and the index, so they stay the same
// across agent restarts. Telemetry: a GPU no running job holds reads 0%, no
// memory used and 35 C; one a running job holds reads the utilisation asked
// for it (90% by default; gpu_source.h), memory used from 10% of its memory
// (idle) to 60% (busy), and from 40 C to 72 C.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu/gpu_source.h"

namespace tide::agent {

// Parses the list. Errors are kInvalidArgument naming the bad part.
Result<std::vector<api::Gpu>> ParseFakeGpus(std::string_view spec, const std::string& node_name);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", stable for (node_name, index).
std::string FakeGpuUuid(const std::string& node_name, int index);

class FakeGpuSource final : public GpuSource {
 public:
  explicit FakeGpuSource(std::vector<api::Gpu> gpus) : gpus_(std::move(gpus)) {}
  static Result<std::unique_ptr<FakeGpuSource>> Create(std::string_view spec,
                                                       const std::string& node_name);

  Result<std::vector<api::Gpu>> Discover() override;
  Result<std::vector<api::Gpu>> Sample(const std::map<int, int>& busy) override;

 private:
  std::vector<api::Gpu> gpus_;
};

}  // namespace tide::agent
