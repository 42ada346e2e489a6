#include "server/telemetry.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "server/delivery.h"
#include "server/gpu_history.h"
#include "server/job_state.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

constexpr int64_t kT0 = 1'699'999'200'000;  // a multiple of an hour

GpuReading At(int64_t at, int util, int64_t mem = 1000, int temp = 50) {
  return {at, util, mem, temp};
}

TEST(GpuHistoryTest, RecentRingAndTiersStayBounded) {
  GpuHistory h({10, {{60'000, 5}, {3'600'000, 3}}});
  // Ten hours at one reading a second.
  for (int64_t s = 0; s < 10 * 3600; ++s) h.Add(At(kT0 + s * 1000, 50));
  EXPECT_EQ(h.recent().size(), 10u);
  EXPECT_EQ(h.recent().back().at, kT0 + (10 * 3600 - 1) * 1000);
  EXPECT_EQ(h.Buckets(0).size(), 6u);  // 5 closed + the open one
  EXPECT_EQ(h.Buckets(1).size(), 4u);
  EXPECT_EQ(h.total().readings, 10 * 3600);
  EXPECT_EQ(h.first_at(), kT0);
}

TEST(GpuHistoryTest, BucketsKeepMinAvgMax) {
  GpuHistory h({4, {{60'000, 10}}});
  // Minute 0: 10, 20, 30; minute 1: 90.
  h.Add(At(kT0, 10, 100, 40));
  h.Add(At(kT0 + 20'000, 20, 200, 50));
  h.Add(At(kT0 + 40'000, 30, 300, 60));
  h.Add(At(kT0 + 60'000, 90, 900, 70));
  auto b = h.Buckets(0);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start, kT0);
  EXPECT_EQ(b[0].width_ms, 60'000);
  EXPECT_EQ(b[0].readings, 3);
  EXPECT_DOUBLE_EQ(b[0].utilization_pct.min, 10);
  EXPECT_DOUBLE_EQ(b[0].utilization_pct.avg(), 20);
  EXPECT_DOUBLE_EQ(b[0].utilization_pct.max, 30);
  EXPECT_DOUBLE_EQ(b[0].memory_used_mb.avg(), 200);
  EXPECT_DOUBLE_EQ(b[0].temperature_c.max, 60);
  EXPECT_EQ(b[1].start, kT0 + 60'000);
  EXPECT_EQ(b[1].readings, 1);
  EXPECT_DOUBLE_EQ(h.total().utilization_pct.avg(), 37.5);
}

TEST(GpuHistoryTest, UnknownReadingsCountInNoStatistic) {
  GpuHistory h({4, {{60'000, 10}}});
  h.Add(At(kT0, -1, -1, -1));
  h.Add(At(kT0 + 1000, 40, 500, 60));
  EXPECT_EQ(h.total().readings, 2);
  EXPECT_EQ(h.total().utilization_pct.count, 1);
  EXPECT_DOUBLE_EQ(h.total().utilization_pct.avg(), 40);
  EXPECT_DOUBLE_EQ(h.total().memory_used_mb.min, 500);
}

TEST(GpuHistoryTest, UtilizationSinceUsesBucketsBeforeTheRing) {
  GpuHistory h({5, {{60'000, 100}}});
  // Ten minutes idle, then five readings at 100%.
  for (int64_t s = 0; s < 600; s += 10) h.Add(At(kT0 + s * 1000, 0));
  for (int i = 0; i < 5; ++i) h.Add(At(kT0 + 600'000 + i * 1000, 100));
  // Only the ring: 100%.
  Stat ring = h.UtilizationSince(kT0 + 600'000);
  EXPECT_EQ(ring.count, 5);
  EXPECT_DOUBLE_EQ(ring.avg(), 100);
  // The whole span: ten closed idle minutes (6 readings each) and the ring.
  Stat all = h.UtilizationSince(kT0);
  EXPECT_EQ(all.count, 60 + 5);
  EXPECT_NEAR(all.avg(), 500.0 / 65, 1e-9);
  // From minute 5 on: five whole minutes.
  EXPECT_EQ(h.UtilizationSince(kT0 + 300'000).count, 30 + 5);
}

class TelemetryTest : public ::testing::Test {
 protected:
  TelemetryTest() : jobs_(&clock_, &delivery_) {
    NodeEntry& n = jobs_.nodes()["n1"];
    n.node.id = "n1";
    n.node.name = "box";
    for (int i = 0; i < 2; ++i) {
      api::Gpu g;
      g.index = i;
      g.model = "RTX4090";
      g.memory_mb = 24576;
      n.node.gpus.push_back(g);
    }
  }

  std::vector<api::Gpu> Readings(int util0, int util1) {
    std::vector<api::Gpu> gpus = jobs_.nodes()["n1"].node.gpus;
    gpus[0].utilization_pct = util0;
    gpus[1].utilization_pct = util1;
    gpus[0].memory_used_mb = gpus[1].memory_used_mb = 1024;
    gpus[0].temperature_c = gpus[1].temperature_c = 60;
    return gpus;
  }

  api::Job Running(const std::string& id, int attempt = 1) {
    api::Job job;
    job.id = id;
    job.status = api::JobStatus::kRunning;
    job.attempt = attempt;
    return job;
  }

  FakeClock clock_{kT0};
  Delivery delivery_;
  JobState jobs_;
};

TEST_F(TelemetryTest, JobSeriesAndRunAverages) {
  TelemetryOptions o;
  Telemetry t(o);
  for (int i = 0; i < 10; ++i) {
    auto gpus = Readings(i < 5 ? 100 : 50, 0);
    t.RecordNode("n1", gpus, kT0 + i * 1000);
    t.RecordJob("j1", 1, 0, "n1", {0}, gpus, kT0 + i * 1000);
  }
  api::JobTelemetry v = t.View(Running("j1"), jobs_, kT0 + 10'000, true);
  ASSERT_EQ(v.gpus.size(), 1u);
  EXPECT_EQ(v.gpus[0].node, "box");
  EXPECT_EQ(v.gpus[0].model, "RTX4090");
  EXPECT_EQ(v.gpus[0].index, 0);
  EXPECT_EQ(v.gpus[0].now.utilization_pct, 50);
  EXPECT_EQ(v.gpus[0].recent.size(), 10u);
  ASSERT_EQ(v.gpus[0].tiers.size(), 2u);
  EXPECT_EQ(v.gpus[0].tiers[0].width_ms, 60'000);
  EXPECT_DOUBLE_EQ(v.avg_utilization_pct, 75);
  EXPECT_DOUBLE_EQ(v.gpus[0].avg_utilization_pct, 75);
  EXPECT_EQ(v.readings, 10);
  EXPECT_FALSE(v.low_utilization);
  // The node's history has both GPUs; the job's only the one it holds.
  ASSERT_NE(t.Node("n1", 1), nullptr);
  EXPECT_EQ(t.Node("n1", 1)->total().readings, 10);
  // Without series: averages only.
  api::JobTelemetry brief = t.View(Running("j1"), jobs_, kT0 + 10'000, false);
  EXPECT_TRUE(brief.gpus[0].recent.empty());
  EXPECT_TRUE(brief.gpus[0].tiers.empty());
  // The wire form reads back.
  auto back = api::JobTelemetryFromJson(api::ToJson(v));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->gpus[0].recent.size(), 10u);
  EXPECT_DOUBLE_EQ(back->avg_utilization_pct, 75);
  EXPECT_EQ(back->gpus[0].node, "box");
}

TEST_F(TelemetryTest, NodeViewHasEveryGpuOfTheNodeWithItsHistory) {
  Telemetry t;
  for (int i = 0; i < 4; ++i) t.RecordNode("n1", Readings(20 * i, 90), kT0 + i * 1000);
  api::Node node;
  node.id = "n1";
  node.name = "box";
  for (int i = 0; i < 3; ++i) {
    api::Gpu g;
    g.index = i;
    g.model = "RTX4090";
    g.memory_mb = 24576;
    node.gpus.push_back(g);
  }
  api::NodeTelemetry v = t.NodeView(node, kT0 + 4000, true);
  EXPECT_EQ(v.node, "box");
  EXPECT_EQ(v.at, kT0 + 4000);
  ASSERT_EQ(v.gpus.size(), 3u);
  EXPECT_EQ(v.gpus[0].recent.size(), 4u);
  EXPECT_EQ(v.gpus[0].now.utilization_pct, 60);
  EXPECT_DOUBLE_EQ(v.gpus[0].avg_utilization_pct, 30);
  EXPECT_EQ(v.gpus[1].now.utilization_pct, 90);
  EXPECT_EQ(v.gpus[1].model, "RTX4090");
  EXPECT_EQ(v.gpus[1].memory_mb, 24576);
  // A GPU no heartbeat has reported yet: there, with nothing known.
  EXPECT_EQ(v.gpus[2].index, 2);
  EXPECT_EQ(v.gpus[2].readings, 0);
  EXPECT_EQ(v.gpus[2].now.utilization_pct, -1);
  EXPECT_TRUE(v.gpus[2].recent.empty());
  nlohmann::json wire = api::ToJson(v);
  EXPECT_EQ(wire["gpus"][0]["recent"].size(), 4u);
  EXPECT_EQ(wire["node_id"], "n1");
  EXPECT_TRUE(t.NodeView(node, kT0 + 4000, false).gpus[0].recent.empty());
}

TEST_F(TelemetryTest, ANewAttemptDropsTheOldGpusButNotTheRunAverage) {
  Telemetry t;
  t.RecordJob("j1", 1, 0, "n1", {0, 1}, Readings(100, 100), kT0);
  t.RecordJob("j1", 2, 0, "n1", {1}, Readings(0, 0), kT0 + 1000);
  const JobTelemetryEntry* e = t.Job("j1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->attempt, 2);
  EXPECT_EQ(e->gpus.size(), 1u);
  EXPECT_EQ(e->attempt_first_at, kT0 + 1000);
  EXPECT_EQ(e->first_at, kT0);
  EXPECT_NEAR(e->utilization_pct.avg(), 200.0 / 3, 1e-9);
}

TEST_F(TelemetryTest, OnlyTheNewestEndedJobsKeepTheirTelemetry) {
  TelemetryOptions o;
  o.ended_jobs_kept = 3;
  Telemetry t(o);
  for (int i = 0; i < 10; ++i) {
    std::string id = "j" + std::to_string(i);
    t.RecordJob(id, 1, 0, "n1", {0}, Readings(50, 0), kT0);
    t.JobEnded(id);
  }
  t.RecordJob("live", 1, 0, "n1", {0}, Readings(50, 0), kT0);
  EXPECT_EQ(t.jobs_kept(), 4u);
  EXPECT_EQ(t.Job("j6"), nullptr);
  EXPECT_NE(t.Job("j9"), nullptr);
  EXPECT_NE(t.Job("live"), nullptr);
}

TEST_F(TelemetryTest, LowUtilizationNeedsTheWholeWindowIdle) {
  TelemetryOptions o;
  o.low_utilization_window_ms = 60'000;
  o.low_utilization_threshold_pct = 10;
  o.low_utilization_min_readings = 3;
  Telemetry idle(o);
  Telemetry busy(o);
  for (int64_t s = 0; s <= 90; s += 2) {
    idle.RecordJob("j", 1, 0, "n1", {0, 1}, Readings(0, 5), kT0 + s * 1000);
    busy.RecordJob("j", 1, 0, "n1", {0, 1}, Readings(0, 90), kT0 + s * 1000);
  }
  // Sampled for less than the window: not yet.
  EXPECT_FALSE(idle.View(Running("j"), jobs_, kT0 + 30'000, false).low_utilization);
  api::JobTelemetry v = idle.View(Running("j"), jobs_, kT0 + 90'000, false);
  EXPECT_TRUE(v.low_utilization);
  EXPECT_EQ(v.window_s, 60);
  EXPECT_EQ(v.threshold_pct, 10);
  EXPECT_NEAR(v.window_utilization_pct, 2.5, 1e-9);
  EXPECT_NE(v.low_utilization_reason.find("low GPU utilisation"), std::string::npos)
      << v.low_utilization_reason;
  EXPECT_NE(v.low_utilization_reason.find("1m"), std::string::npos) << v.low_utilization_reason;
  // One GPU of two busy: 45% on average.
  EXPECT_FALSE(busy.View(Running("j"), jobs_, kT0 + 90'000, false).low_utilization);
  // Not running any more: no flag.
  api::Job done = Running("j");
  done.status = api::JobStatus::kCompleted;
  EXPECT_FALSE(idle.View(done, jobs_, kT0 + 90'000, false).low_utilization);
  // No readings in the window (the agent went quiet): no flag.
  EXPECT_FALSE(idle.View(Running("j"), jobs_, kT0 + 500'000, false).low_utilization);
}

TEST_F(TelemetryTest, UnknownJobHasAnEmptyView) {
  Telemetry t;
  api::JobTelemetry v = t.View(Running("nope"), jobs_, kT0, true);
  EXPECT_TRUE(v.gpus.empty());
  EXPECT_EQ(v.readings, 0);
  EXPECT_FALSE(v.low_utilization);
}

// Through the core: heartbeats of a running job fill its telemetry, the
// node's GPUs show in /metrics, and only the owner reads it.
TEST_F(CoreTest, HeartbeatsBecomeTelemetryAndMetrics) {
  Caller alice = User("alice");
  Caller bob = User("bob");
  std::string node = AddNode("box", 2);
  auto job = core_->SubmitJob(alice, Spec(1), "");
  ASSERT_TRUE(job.ok());
  const std::string id = job->first.id;
  const int held = job->first.gpus.at(0);
  auto beat = [&](int util) {
    api::Heartbeat hb;
    hb.gpus = Machine("box", 2).gpus;
    for (auto& g : hb.gpus) {
      g.utilization_pct = g.index == held ? util : 0;
      g.memory_used_mb = g.index == held ? 8192 : 0;
      g.temperature_c = 50;
    }
    hb.running.push_back({id, 1});
    ASSERT_TRUE(core_->Heartbeat(node, hb).ok());
    clock_.Advance(1000);
  };
  beat(80);  // still starting: the node's history only
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  for (int util : {60, 80, 100}) beat(util);

  auto t = core_->JobTelemetry(alice, id, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->status, "running");
  EXPECT_EQ(t->readings, 3);
  EXPECT_DOUBLE_EQ(t->avg_utilization_pct, 80);
  ASSERT_EQ(t->gpus.size(), 1u);
  EXPECT_EQ(t->gpus[0].index, held);
  EXPECT_EQ(t->gpus[0].node, "box");
  EXPECT_EQ(t->gpus[0].now.utilization_pct, 100);
  EXPECT_EQ(t->gpus[0].recent.size(), 3u);
  EXPECT_TRUE(core_->JobTelemetry(bob, id, true).status().IsNotFound());
  auto none = core_->JobTelemetry(alice, "j-none", true);
  EXPECT_TRUE(none.status().IsNotFound());
  EXPECT_NE(none.status().message().find("j-none"), std::string::npos);

  std::string metrics = core_->Metrics();
  EXPECT_NE(metrics.find("tide_gpu_utilization_ratio{node=\"box\",gpu=\"" +
                         std::to_string(held) + "\",model=\"RTX4090\"} 1.00"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tide_gpu_memory_used_bytes{node=\"box\",gpu=\"" +
                         std::to_string(held) + "\",model=\"RTX4090\"} 8589934592"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tide_gpu_temperature_celsius{node=\"box\""), std::string::npos);

  // Ended: the telemetry stays readable.
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 0, "", ""}).ok());
  auto after = core_->JobTelemetry(alice, id, false);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->status, "completed");
  EXPECT_EQ(after->readings, 3);
  EXPECT_FALSE(after->low_utilization);
}

}  // namespace
}  // namespace tide::server
