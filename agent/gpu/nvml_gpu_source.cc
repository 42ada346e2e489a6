// The few NVML declarations we need, written out here so that no NVIDIA
// header is needed at build time. Signatures follow nvml.h (NVML API v2).
#include "agent/gpu/nvml_gpu_source.h"

#include <dlfcn.h>

#include <string>

namespace tide::agent {
namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS == 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;  // percent
  unsigned int memory;
};
constexpr int kNvmlTemperatureGpu = 0;    // NVML_TEMPERATURE_GPU
constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetMinorFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using GetMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using GetUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using GetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);

}  // namespace

struct NvmlGpuSource::Api {
  void* lib = nullptr;
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;  // optional
  GetCountFn get_count = nullptr;
  GetHandleFn get_handle = nullptr;
  GetStringFn get_name = nullptr;
  GetStringFn get_uuid = nullptr;
  GetMinorFn get_minor = nullptr;  // optional
  GetMemoryFn get_memory = nullptr;
  GetUtilizationFn get_utilization = nullptr;
  GetTemperatureFn get_temperature = nullptr;

  std::string Error(nvmlReturn_t r) const {
    std::string s = "NVML error " + std::to_string(r);
    if (error_string != nullptr) {
      if (const char* m = error_string(r)) s += " (" + std::string(m) + ")";
    }
    return s;
  }
};

Result<std::unique_ptr<NvmlGpuSource>> NvmlGpuSource::Create() {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(
        "NVML is not available: cannot load libnvidia-ml.so.1 (" +
        std::string(err != nullptr ? err : "unknown error") +
        "); install the NVIDIA driver, or run with --fake-gpus (e.g. 4xRTX4090:24GB)");
  }
  std::string missing;
  auto sym = [&](const char* name) {
    void* p = dlsym(api->lib, name);
    if (p == nullptr && missing.empty()) missing = name;
    return p;
  };
  api->init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
  api->shutdown = reinterpret_cast<ShutdownFn>(sym("nvmlShutdown"));
  api->get_count = reinterpret_cast<GetCountFn>(sym("nvmlDeviceGetCount_v2"));
  api->get_handle = reinterpret_cast<GetHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  api->get_name = reinterpret_cast<GetStringFn>(sym("nvmlDeviceGetName"));
  api->get_uuid = reinterpret_cast<GetStringFn>(sym("nvmlDeviceGetUUID"));
  api->get_minor = reinterpret_cast<GetMinorFn>(dlsym(api->lib, "nvmlDeviceGetMinorNumber"));
  api->get_memory = reinterpret_cast<GetMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  api->get_utilization = reinterpret_cast<GetUtilizationFn>(sym("nvmlDeviceGetUtilizationRates"));
  api->get_temperature = reinterpret_cast<GetTemperatureFn>(sym("nvmlDeviceGetTemperature"));
  api->error_string = reinterpret_cast<ErrorStringFn>(dlsym(api->lib, "nvmlErrorString"));
  if (!missing.empty()) {
    dlclose(api->lib);
    return Status::Unavailable("libnvidia-ml.so.1 lacks " + missing +
                               " (driver too old?); use --fake-gpus to run without it");
  }
  nvmlReturn_t r = api->init();
  if (r != 0) {
    std::string msg = api->Error(r);
    dlclose(api->lib);
    return Status::Unavailable("nvmlInit failed: " + msg +
                               "; is the NVIDIA driver loaded? (use --fake-gpus without GPUs)");
  }
  return std::unique_ptr<NvmlGpuSource>(new NvmlGpuSource(std::move(api)));
}

NvmlGpuSource::NvmlGpuSource(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlGpuSource::~NvmlGpuSource() {
  if (api_ && api_->lib != nullptr) {
    api_->shutdown();
    dlclose(api_->lib);
  }
}

Result<std::vector<api::Gpu>> NvmlGpuSource::Discover() { return Read(false); }

Result<std::vector<api::Gpu>> NvmlGpuSource::Sample(const std::map<int, int>& /*busy*/) {
  return Read(true);
}

Result<std::vector<api::Gpu>> NvmlGpuSource::Read(bool telemetry) {
  unsigned int count = 0;
  if (nvmlReturn_t r = api_->get_count(&count); r != 0) {
    return Status::Unavailable("nvmlDeviceGetCount: " + api_->Error(r));
  }
  std::vector<api::Gpu> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = api_->get_handle(i, &dev); r != 0) {
      return Status::Unavailable("nvmlDeviceGetHandleByIndex(" + std::to_string(i) +
                                 "): " + api_->Error(r));
    }
    api::Gpu g;
    g.index = static_cast<int>(i);
    char buf[kNameBufferSize > kUuidBufferSize ? kNameBufferSize : kUuidBufferSize] = {};
    if (api_->get_name(dev, buf, kNameBufferSize) == 0) g.name = buf;
    buf[0] = '\0';
    if (api_->get_uuid(dev, buf, kUuidBufferSize) == 0) g.uuid = buf;
    unsigned int minor = 0;
    if (api_->get_minor != nullptr && api_->get_minor(dev, &minor) == 0) {
      g.minor = static_cast<int>(minor);
    }
    g.model = api::CanonicalGpuModel(g.name);
    nvmlMemory_t mem{};
    if (api_->get_memory(dev, &mem) == 0) {
      g.memory_mb = static_cast<int64_t>(mem.total >> 20);
      if (telemetry) g.memory_used_mb = static_cast<int64_t>(mem.used >> 20);
    }
    if (telemetry) {
      nvmlUtilization_t util{};
      if (api_->get_utilization(dev, &util) == 0) g.utilization_pct = static_cast<int>(util.gpu);
      unsigned int temp = 0;
      if (api_->get_temperature(dev, kNvmlTemperatureGpu, &temp) == 0) {
        g.temperature_c = static_cast<int>(temp);
      }
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace tide::agent
