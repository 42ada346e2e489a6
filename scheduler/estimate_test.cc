#include "scheduler/estimate.h"

#include <gtest/gtest.h>

namespace tide::sched {
namespace {

TEST(Estimate, JobsStartAsRunningWorkEnds) {
  NodeView n;
  n.id = "n";
  n.gpus = {{0, "A100", 80 * 1024, false}, {1, "A100", 80 * 1024, true}};
  RunningJob busy;
  busy.id = "busy";
  busy.allocs = {{"n", {0}}};
  busy.expected_end = 100'000;
  std::vector<NodeView> nodes = {n};
  std::vector<RunningJob> running = {busy};
  std::vector<PendingJob> queue(4);
  queue[0].id = "now";
  queue[0].max_runtime_ms = 500'000;
  queue[1].id = "after-busy";
  queue[1].max_runtime_ms = 50'000;
  queue[1].submitted_at = 1;
  queue[2].id = "unknown-runtime";
  queue[2].submitted_at = 2;
  queue[3].id = "never";
  queue[3].gpu_types = {"H100"};
  SchedulerConfig cfg;
  auto starts = ExpectedStarts({nodes, queue, running, {}, cfg, 0});
  EXPECT_EQ(starts.at("now"), 0);
  EXPECT_EQ(starts.at("after-busy"), 100'000);
  EXPECT_EQ(starts.at("unknown-runtime"), 150'000);
  EXPECT_FALSE(starts.count("never"));
  // Work without an expected end is planned with the stand-in.
  running[0].expected_end = 0;
  EstimateOptions opt;
  opt.default_runtime_ms = 10'000;
  starts = ExpectedStarts({nodes, queue, running, {}, cfg, 0}, opt);
  EXPECT_EQ(starts.at("after-busy"), 10'000);
}

}  // namespace
}  // namespace tide::sched
