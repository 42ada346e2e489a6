// NvmlGpuSource: real GPUs through NVML (libnvidia-ml.so.1), loaded with
// dlopen at run time so the agent builds and runs without CUDA or a driver.
//
// Indices are NVML's, which enumerate by PCI bus id: jobs get
// CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers the GPUs the same way.
#pragma once

#include <memory>

#include "agent/gpu/gpu_source.h"

namespace tide::agent {

class NvmlGpuSource final : public GpuSource {
 public:
  // Loads the library and initialises NVML. kUnavailable with a clear message
  // when the library is missing or the driver does not answer.
  static Result<std::unique_ptr<NvmlGpuSource>> Create();
  ~NvmlGpuSource() override;

  Result<std::vector<api::Gpu>> Discover() override;
  Result<std::vector<api::Gpu>> Sample(const std::map<int, int>& busy) override;

  struct Api;  // the resolved NVML entry points

 private:
  explicit NvmlGpuSource(std::unique_ptr<Api> api);
  Result<std::vector<api::Gpu>> Read(bool telemetry);

  std::unique_ptr<Api> api_;
};

}  // namespace tide::agent
