#include "agent/gpu/nvml_gpu_source.h"

#include <gtest/gtest.h>

namespace tide::agent {
namespace {

// Without a driver (CI, laptops) NVML is unavailable with a clear message;
// on a GPU machine the real devices come back with telemetry.
TEST(NvmlGpuSourceTest, DiscoversOrFailsClearly) {
  auto source = NvmlGpuSource::Create();
  if (!source.ok()) {
    EXPECT_EQ(source.status().code(), Code::kUnavailable);
    EXPECT_NE(source.status().message().find("--fake-gpus"), std::string::npos)
        << source.status().message();
    GTEST_SKIP() << "no NVML here: " << source.status().message();
  }
  auto gpus = (*source)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  for (size_t i = 0; i < gpus->size(); ++i) {
    const api::Gpu& g = (*gpus)[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_FALSE(g.model.empty()) << g.name;
    EXPECT_GT(g.memory_mb, 0);
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_EQ(g.utilization_pct, -1);
  }
  auto sample = (*source)->Sample({});
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  ASSERT_EQ(sample->size(), gpus->size());
  for (const api::Gpu& g : *sample) {
    EXPECT_GE(g.utilization_pct, 0);
    EXPECT_GE(g.memory_used_mb, 0);
    EXPECT_GT(g.temperature_c, 0);
  }
}

}  // namespace
}  // namespace tide::agent
