#include "agent/gpu/fake_gpu_source.h"

#include <gtest/gtest.h>

namespace tide::agent {
namespace {

TEST(FakeGpuSourceTest, ParsesCountsModelsAndMemory) {
  auto gpus = ParseFakeGpus("4xRTX4090:24GB, 2xA100:80GB,H100:81920MB", "node-a");
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ((*gpus)[i].index, i);
  EXPECT_EQ((*gpus)[0].model, "RTX4090");
  EXPECT_EQ((*gpus)[0].name, "RTX4090");
  EXPECT_EQ((*gpus)[0].memory_mb, 24 * 1024);
  EXPECT_EQ((*gpus)[4].model, "A100");
  EXPECT_EQ((*gpus)[5].memory_mb, 80 * 1024);
  EXPECT_EQ((*gpus)[6].model, "H100");
  EXPECT_EQ((*gpus)[6].memory_mb, 81920);
  EXPECT_EQ((*gpus)[0].utilization_pct, -1);  // Discover carries no telemetry
}

TEST(FakeGpuSourceTest, CountIsOptionalAndModelsAreCanonical) {
  auto gpus = ParseFakeGpus("NVIDIA GeForce RTX 4090:24G", "n");
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].model, "RTX4090");
  EXPECT_EQ((*gpus)[0].name, "NVIDIA GeForce RTX 4090");
}

TEST(FakeGpuSourceTest, RejectsBadEntriesNamingThem) {
  for (const char* bad : {"", "4xRTX4090", "4x:24GB", "0xA100:80GB", "2xA100:lots",
                          "RTX4090:24GB,,A100:80GB", "2xA100:0GB", "1000xA100:80GB"}) {
    auto gpus = ParseFakeGpus(bad, "n");
    EXPECT_FALSE(gpus.ok()) << bad;
    EXPECT_EQ(gpus.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(gpus.status().field(), "fake_gpus");
  }
  auto gpus = ParseFakeGpus("4xRTX4090:24GB,2xA100:lots", "n");
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.status().message().find("\"2xA100:lots\""), std::string::npos)
      << gpus.status().message();
  gpus = ParseFakeGpus("65xA100:80GB", "n");
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.status().message().find("64"), std::string::npos);
}

TEST(FakeGpuSourceTest, UuidsAreStablePerNodeAndIndex) {
  auto a = ParseFakeGpus("2xA100:80GB", "node-a");
  auto again = ParseFakeGpus("2xA100:80GB", "node-a");
  auto b = ParseFakeGpus("2xA100:80GB", "node-b");
  ASSERT_TRUE(a.ok() && again.ok() && b.ok());
  EXPECT_EQ((*a)[0].uuid, (*again)[0].uuid);
  EXPECT_NE((*a)[0].uuid, (*a)[1].uuid);
  EXPECT_NE((*a)[0].uuid, (*b)[0].uuid);
  EXPECT_EQ((*a)[0].uuid.size(), 4u + 36u);
  EXPECT_EQ((*a)[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ((*a)[0].uuid, FakeGpuUuid("node-a", 0));
}

TEST(FakeGpuSourceTest, TelemetryFollowsBusyIndices) {
  auto source = FakeGpuSource::Create("2xRTX4090:24GB", "n");
  ASSERT_TRUE(source.ok());
  auto discovered = (*source)->Discover();
  ASSERT_TRUE(discovered.ok());
  EXPECT_EQ(discovered->size(), 2u);
  auto sample = (*source)->Sample({{1, kFakeBusyUtilizationPct}});
  ASSERT_TRUE(sample.ok());
  EXPECT_EQ((*sample)[0].utilization_pct, 0);
  EXPECT_EQ((*sample)[0].memory_used_mb, 0);
  EXPECT_EQ((*sample)[1].utilization_pct, 90);
  EXPECT_GT((*sample)[1].memory_used_mb, 0);
  EXPECT_LE((*sample)[1].memory_used_mb, (*sample)[1].memory_mb);
  EXPECT_GT((*sample)[1].temperature_c, (*sample)[0].temperature_c);
}

TEST(FakeGpuSourceTest, AJobCanAskForIdleOrHalfBusyGpus) {
  auto source = FakeGpuSource::Create("3xA100:80GB", "n");
  ASSERT_TRUE(source.ok());
  auto sample = (*source)->Sample({{0, 0}, {1, 45}, {2, 250}});
  ASSERT_TRUE(sample.ok());
  EXPECT_EQ((*sample)[0].utilization_pct, 0);
  EXPECT_EQ((*sample)[0].memory_used_mb, 80 * 1024 / 10);  // held, allocated, idle
  EXPECT_EQ((*sample)[1].utilization_pct, 45);
  EXPECT_GT((*sample)[1].memory_used_mb, (*sample)[0].memory_used_mb);
  EXPECT_EQ((*sample)[2].utilization_pct, 100);  // clamped
  EXPECT_LE((*sample)[2].memory_used_mb, (*sample)[2].memory_mb);
}

}  // namespace
}  // namespace tide::agent
