#include "scheduler/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace tide::sched {
namespace {

NodeView MakeNode(const std::string& id, int gpus, const std::string& model, int64_t mem_mb = 24576) {
  NodeView n;
  n.id = id;
  n.name = id;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({i, model, mem_mb, true});
  return n;
}

PendingJob MakeJob(const std::string& id, int gpus, std::vector<std::string> types = {},
                   int64_t submitted = 0, int64_t mem = 0) {
  return PendingJob{id, gpus, std::move(types), mem, submitted};
}

Plan Plan1(const std::vector<NodeView>& nodes, const std::vector<PendingJob>& queue) {
  return Schedule(ScheduleInput{nodes, queue, 0});
}

TEST(ScheduleTest, PlacesOnDistinctGpus) {
  auto plan = Plan1({MakeNode("n1", 4, "RTX4090")}, {MakeJob("a", 2), MakeJob("b", 2, {}, 1)});
  ASSERT_EQ(plan.placements.size(), 2u);
  std::set<int> used;
  for (auto& p : plan.placements) {
    EXPECT_EQ(p.gpus.size(), 2u);
    for (int g : p.gpus) EXPECT_TRUE(used.insert(g).second) << "GPU " << g << " given twice";
  }
  EXPECT_TRUE(plan.pending_reasons.empty());
}

TEST(ScheduleTest, UnknownTypeSaysSo) {
  auto plan = Plan1({MakeNode("n1", 4, "RTX4090")}, {MakeJob("a", 1, {"H100"})});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(plan.pending_reasons["a"], "no node has gpu_type=H100");
}

TEST(ScheduleTest, NoNodes) {
  auto plan = Plan1({}, {MakeJob("a", 1)});
  EXPECT_EQ(plan.pending_reasons["a"], "no node is registered");
}

TEST(ScheduleTest, TooManyGpusForAnyNode) {
  auto plan = Plan1({MakeNode("n1", 4, "RTX4090"), MakeNode("n2", 4, "RTX4090")}, {MakeJob("a", 8)});
  EXPECT_EQ(plan.pending_reasons["a"], "no node has 8 GPUs");
}

TEST(ScheduleTest, MinimumMemoryFilters) {
  auto plan = Plan1({MakeNode("small", 4, "A100", 40960), MakeNode("big", 2, "A100", 81920)},
                  {MakeJob("a", 1, {"A100"}, 0, 80 * 1024)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "big");
  auto none = Plan1({MakeNode("small", 4, "A100", 40960)}, {MakeJob("a", 1, {"A100"}, 0, 80 * 1024)});
  EXPECT_EQ(none.pending_reasons["a"], "no node has a A100 with 80GB of memory");
}

TEST(ScheduleTest, WaitingJobExplainsAndHoldsItsNodes) {
  NodeView n = MakeNode("n1", 4, "RTX4090");
  n.gpus[0].free = n.gpus[1].free = n.gpus[2].free = false;  // 1 free
  auto plan = Plan1({n}, {MakeJob("big", 2, {}, 0), MakeJob("small", 1, {}, 1)});
  EXPECT_TRUE(plan.placements.empty()) << "the later job must not take the waiting job's node";
  EXPECT_EQ(plan.pending_reasons["big"], "waiting for 2 GPUs to be free on one node");
  EXPECT_EQ(plan.pending_reasons["small"], "waiting for 1 GPU to be free on one node; 1 job ahead");
}

TEST(ScheduleTest, LaterJobMayUseNodesTheWaitingJobCannot) {
  NodeView a100 = MakeNode("a", 2, "A100");
  a100.gpus[0].free = false;
  auto plan = Plan1({a100, MakeNode("r", 2, "RTX4090")},
                  {MakeJob("wants-a100", 2, {"A100"}, 0), MakeJob("any-rtx", 1, {"RTX4090"}, 1)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "any-rtx");
}

TEST(ScheduleTest, BestFitPacksPartlyUsedNode) {
  NodeView used = MakeNode("b-used", 4, "RTX4090");
  used.gpus[0].free = false;
  auto plan = Plan1({MakeNode("a-empty", 4, "RTX4090"), used}, {MakeJob("j", 1)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "b-used");
  EXPECT_EQ(plan.placements[0].gpus, std::vector<int>({1}));
}

TEST(ScheduleTest, LostNodesTakeNothing) {
  NodeView n = MakeNode("n1", 4, "RTX4090");
  n.schedulable = false;
  auto plan = Plan1({n}, {MakeJob("a", 1)});
  EXPECT_EQ(plan.pending_reasons["a"], "no node is registered");
}

TEST(ScheduleTest, SameInputSamePlan) {
  std::vector<NodeView> nodes = {MakeNode("n1", 8, "RTX4090"), MakeNode("n2", 8, "A100")};
  std::vector<PendingJob> queue;
  for (int i = 0; i < 50; ++i) {
    queue.push_back(MakeJob("j" + std::to_string(i), 1 + i % 3, i % 2 ? std::vector<std::string>{"A100"} : std::vector<std::string>{}, i % 7));
  }
  auto p1 = Plan1(nodes, queue);
  std::reverse(queue.begin(), queue.end());
  auto p2 = Plan1(nodes, queue);
  ASSERT_EQ(p1.placements.size(), p2.placements.size());
  for (size_t i = 0; i < p1.placements.size(); ++i) {
    EXPECT_EQ(p1.placements[i].job_id, p2.placements[i].job_id);
    EXPECT_EQ(p1.placements[i].node_id, p2.placements[i].node_id);
    EXPECT_EQ(p1.placements[i].gpus, p2.placements[i].gpus);
  }
  EXPECT_EQ(p1.pending_reasons, p2.pending_reasons);
}

TEST(ScheduleTest, NeverOverAllocates) {
  std::vector<NodeView> nodes = {MakeNode("n1", 4, "RTX4090"), MakeNode("n2", 2, "RTX4090")};
  std::vector<PendingJob> queue;
  for (int i = 0; i < 20; ++i) queue.push_back(MakeJob("j" + std::to_string(i), 1 + i % 4, {}, i));
  auto plan = Plan1(nodes, queue);
  std::set<std::pair<std::string, int>> used;
  for (auto& p : plan.placements) {
    for (int g : p.gpus) EXPECT_TRUE(used.insert(std::make_pair(p.node_id, g)).second);
  }
  EXPECT_LE(used.size(), 6u);
}

TEST(ScheduleTest, IncrementalPassEqualsFullPass) {
  NodeView n1 = MakeNode("n1", 4, "RTX4090");
  n1.gpus[0].free = n1.gpus[1].free = false;
  std::vector<NodeView> nodes = {n1, MakeNode("n2", 2, "A100")};
  std::vector<PendingJob> all;
  for (int i = 0; i < 30; ++i) {
    all.push_back(MakeJob("j" + std::to_string(100 + i), 1 + i % 3,
                          i % 4 ? std::vector<std::string>{} : std::vector<std::string>{"A100"}, i));
  }
  Plan full = Plan1(nodes, all);
  // First 10 jobs, apply their placements, then the other 20 from the saved state.
  std::vector<PendingJob> head(all.begin(), all.begin() + 10), tail(all.begin() + 10, all.end());
  Plan first = Plan1(nodes, head);
  for (auto& p : first.placements) {
    for (auto& n : nodes) {
      if (n.id != p.node_id) continue;
      for (auto& g : n.gpus) {
        if (std::find(p.gpus.begin(), p.gpus.end(), g.index) != p.gpus.end()) g.free = false;
      }
    }
  }
  Plan second = Schedule(ScheduleInput{nodes, tail, 0, first.held_nodes, first.waiting_ahead});
  std::vector<Placement> combined = first.placements;
  combined.insert(combined.end(), second.placements.begin(), second.placements.end());
  ASSERT_EQ(combined.size(), full.placements.size());
  for (size_t i = 0; i < combined.size(); ++i) {
    EXPECT_EQ(combined[i].job_id, full.placements[i].job_id);
    EXPECT_EQ(combined[i].gpus, full.placements[i].gpus);
  }
  auto reasons = first.pending_reasons;
  reasons.insert(second.pending_reasons.begin(), second.pending_reasons.end());
  EXPECT_EQ(reasons, full.pending_reasons);
}

}  // namespace
}  // namespace tide::sched
