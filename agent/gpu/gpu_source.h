// GpuSource: where the agent learns which GPUs it has and how busy they are.
//
// NvmlGpuSource asks the NVIDIA driver (libnvidia-ml, loaded at run time);
// FakeGpuSource invents GPUs from a "--fake-gpus" list for machines without
// them, for tests and demos.
//
// Thread safety: an implementation may be called from one thread at a time.
#pragma once

#include <map>
#include <vector>

#include "api/types.h"
#include "common/status.h"

namespace tide::agent {

// What a fake GPU held by a running job reads, unless the job's environment
// sets TIDE_FAKE_GPU_UTILIZATION (0-100) to look idle or half busy.
inline constexpr int kFakeBusyUtilizationPct = 90;
inline constexpr const char* kFakeUtilizationEnv = "TIDE_FAKE_GPU_UTILIZATION";

class GpuSource {
 public:
  virtual ~GpuSource() = default;

  // The GPUs of this machine in driver order (index 0..n-1), with name,
  // canonical model, memory and UUID; telemetry fields are -1.
  virtual Result<std::vector<api::Gpu>> Discover() = 0;

  // The same GPUs with telemetry (utilization, memory used, temperature)
  // filled in where the source can measure it. `busy` maps each index the
  // agent has handed to a running job to the utilisation (percent) a fake
  // GPU shows for it (kFakeBusyUtilizationPct unless the job set
  // TIDE_FAKE_GPU_UTILIZATION): a real source ignores it, the fake one uses
  // it to look plausible.
  virtual Result<std::vector<api::Gpu>> Sample(const std::map<int, int>& busy) = 0;
};

}  // namespace tide::agent
