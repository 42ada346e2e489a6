#include "scheduler/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "scheduler/fair_share.h"
#include "scheduler/feasibility.h"
#include "scheduler/rank.h"

namespace tide::sched {
namespace {

NodeView Node(const std::string& id, int gpus, const std::string& model = "RTX4090",
              int64_t mem_mb = 24576) {
  NodeView n;
  n.id = n.name = id;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({i, model, mem_mb, true});
  return n;
}

PendingJob Job(const std::string& id, int gpus, int64_t submitted = 0) {
  PendingJob j;
  j.id = id;
  j.gpu_count = gpus;
  j.submitted_at = submitted;
  return j;
}

void Use(NodeView& n, std::vector<int> gpus) {
  for (int g : gpus) n.gpus[static_cast<size_t>(g)].free = false;
}

SchedulerConfig Config(Policy p, bool backfill = true) {
  SchedulerConfig c;
  c.policy = p;
  c.backfill = backfill;
  c.las_preempt_after_ms = 0;
  return c;
}

const Placement* Find(const Plan& plan, const std::string& id) {
  for (const auto& p : plan.placements) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

std::string Reason(const Plan& plan, const std::vector<PendingJob>& q, const std::string& id) {
  for (const auto& p : plan.pending) {
    if (q[p.job].id == id) return PendingReason(plan, p);
  }
  return "";
}

std::vector<std::string> RankedIds(const Plan& plan, const std::vector<PendingJob>& q) {
  std::vector<std::string> out;
  for (uint32_t i : plan.ranked) out.push_back(q[i].id);
  return out;
}

// --- feasibility -----------------------------------------------------------

TEST(Feasibility, PlacesOnDistinctGpus) {
  std::vector<NodeView> nodes = {Node("n1", 4)};
  std::vector<PendingJob> q = {Job("a", 2), Job("b", 2, 1)};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 2u);
  std::set<int> all;
  for (auto& p : plan.placements) all.insert(p.allocs[0].gpus.begin(), p.allocs[0].gpus.end());
  EXPECT_EQ(all.size(), 4u);
}

TEST(Feasibility, EachFilterNamesItself) {
  NodeView n = Node("n1", 2, "A100", 40960);
  n.labels["region"] = "eu";
  n.price = 2'000'000;
  n.cpus = n.cpus_free = 16;
  n.memory_mb = n.memory_free_mb = 64000;
  std::vector<NodeView> nodes = {n};
  auto why = [&](PendingJob j) {
    std::vector<PendingJob> q = {j};
    Plan plan = Schedule({nodes, q});
    EXPECT_TRUE(plan.placements.empty());
    EXPECT_EQ(plan.pending.size(), 1u);
    return std::make_pair(plan.pending[0].kind, PendingReason(plan, plan.pending[0]));
  };
  PendingJob j = Job("j", 1);
  j.gpu_types = {"H100"};
  EXPECT_EQ(why(j).second, "no node has gpu_type=H100");
  j = Job("j", 1);
  j.gpu_memory_mb = 80 * 1024;
  EXPECT_EQ(why(j).second, "no node has a GPU with 80GB of memory");
  j = Job("j", 4);
  EXPECT_EQ(why(j).second, "no node has 4 GPUs");
  j = Job("j", 1);
  j.constraints["region"] = "us";
  EXPECT_EQ(why(j).second, "no node with 1 GPU has labels region=us");
  j = Job("j", 1);
  j.cpus = 32;
  EXPECT_NE(why(j).second.find("32.0 CPUs"), std::string::npos);
  j = Job("j", 1);
  j.max_price = 1'000'000;
  auto [kind, text] = why(j);
  EXPECT_EQ(kind, WaitKind::kPrice);
  EXPECT_EQ(text, "max_price 1.00 per GPU-hour is below every matching node's price (cheapest 2.00)");
  j = Job("j", 1, 0);
  j.nodes = 2;
  EXPECT_EQ(why(j).second, "1 of the 2 nodes needed have 1 GPU");
}

TEST(Feasibility, AJobRunsOnlyWhereItsImageIsOffered) {
  std::vector<NodeView> nodes = {Node("n1", 2), Node("n2", 2)};
  nodes[1].images = {"host", "pytorch-2.3"};
  for (int round = 0; round < 2; ++round) {
    nodes[0].images = round == 0 ? std::vector<std::string>{"host"} : std::vector<std::string>{};
    std::vector<PendingJob> q = {Job("torch", 1)};
    q[0].image = "pytorch-2.3";
    Plan plan = Schedule({nodes, q});
    ASSERT_EQ(plan.placements.size(), 1u);
    EXPECT_EQ(plan.placements[0].allocs[0].node_id, "n2");
  }
  Plan plan;
  std::vector<PendingJob> missing = {Job("jax", 1)};
  missing[0].image = "jax-0.4";
  plan = Schedule({nodes, missing});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(Reason(plan, missing, "jax"), "no node offers image \"jax-0.4\"");
  missing[0].image = "pytorch-2.3";
  missing[0].nodes = 2;
  plan = Schedule({nodes, missing});
  EXPECT_EQ(Reason(plan, missing, "jax"), "fewer than 2 nodes offer image \"pytorch-2.3\"");
}

TEST(Feasibility, LostAndDrainingNodesTakeNothing) {
  std::vector<NodeView> nodes = {Node("n1", 2), Node("n2", 2)};
  nodes[0].schedulable = false;
  nodes[1].draining = true;
  std::vector<PendingJob> q = {Job("a", 1)};
  Plan plan = Schedule({nodes, q});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(Reason(plan, q, "a"), "every node is draining");
}

TEST(Feasibility, LabelsPriceAndHostRoomSelectTheNode) {
  std::vector<NodeView> nodes = {Node("us", 1), Node("eu", 1), Node("eu-cheap", 1)};
  nodes[0].labels["region"] = "us";
  nodes[1].labels["region"] = nodes[2].labels["region"] = "eu";
  nodes[1].price = 3'000'000;
  nodes[2].price = 1'000'000;
  nodes[2].cpus = 8;
  nodes[2].cpus_free = 2;
  PendingJob j = Job("j", 1);
  j.constraints["region"] = "eu";
  j.cpus = 4;
  std::vector<PendingJob> q = {j};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "eu");  // eu-cheap lacks free CPUs
  q[0].cpus = 2;
  plan = Schedule({nodes, q});
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "eu-cheap");
  q[0].max_price = 2'000'000;
  q[0].cpus = 4;  // the cheap one has no room, the other is too dear
  plan = Schedule({nodes, q});
  EXPECT_TRUE(plan.placements.empty());
}

// --- placement ---------------------------------------------------------------

TEST(Placement, BestFitKeepsWholeNodesFree) {
  std::vector<NodeView> nodes = {Node("a", 8), Node("b", 8)};
  Use(nodes[1], {0, 1, 2, 3, 4, 5});
  std::vector<PendingJob> q = {Job("small", 2)};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "b");
  EXPECT_EQ(plan.placements[0].allocs[0].gpus, (std::vector<int>{6, 7}));
}

TEST(Placement, NeverDearerThanTheCheapestFreeNodeThatFits) {
  // A whole free A100 node at 10 and a half-used RTX4090 node at 0.4: a
  // job without a GPU type goes to the cheap one even though the dear one
  // would fit it best; packing only breaks ties of price.
  std::vector<NodeView> nodes = {Node("a100", 1, "A100"), Node("rtx", 4), Node("rtx-free", 4)};
  nodes[0].price = 10'000'000;
  nodes[1].price = nodes[2].price = 400'000;
  Use(nodes[1], {0, 1});
  std::vector<PendingJob> q = {Job("any", 1)};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "rtx") << "cheapest, then the best fit";
  // Pack first (tide sim's comparison) takes the best fit whatever it costs.
  SchedulerConfig pack;
  pack.placement = PlacementOrder::kPackFirst;
  plan = Schedule({nodes, q, ScheduleInput::kNoRunning, ScheduleInput::kNoAccounts, pack});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "a100");
  // Asked for what only the dear node has: it goes there.
  q[0].gpu_types = {"A100"};
  plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocs[0].node_id, "a100");
  // A gang of two takes the two cheap nodes, not the dear one.
  q = {Job("gang", 1)};
  q[0].nodes = 2;
  plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  std::set<std::string> used;
  for (const auto& a : plan.placements[0].allocs) used.insert(a.node_id);
  EXPECT_EQ(used, (std::set<std::string>{"rtx", "rtx-free"}));
}

TEST(Placement, CheaperThenMoreReliable) {
  std::vector<NodeView> nodes = {Node("dear", 1), Node("flaky", 1), Node("solid", 1)};
  nodes[0].price = 5;
  nodes[1].reliability = 0.5;
  std::vector<PendingJob> q = {Job("a", 1), Job("b", 1, 1), Job("c", 1, 2)};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 3u);
  EXPECT_EQ(Find(plan, "a")->allocs[0].node_id, "solid");
  EXPECT_EQ(Find(plan, "b")->allocs[0].node_id, "flaky");
  EXPECT_EQ(Find(plan, "c")->allocs[0].node_id, "dear");
}

TEST(Placement, GangTakesAllItsNodesOrNone) {
  std::vector<NodeView> nodes = {Node("a", 4), Node("b", 4), Node("c", 4)};
  Use(nodes[2], {0});
  PendingJob gang = Job("gang", 4);
  gang.nodes = 2;
  std::vector<PendingJob> q = {gang};
  Plan plan = Schedule({nodes, q});
  ASSERT_EQ(plan.placements.size(), 1u);
  ASSERT_EQ(plan.placements[0].allocs.size(), 2u);
  std::set<std::string> used;
  for (auto& a : plan.placements[0].allocs) {
    used.insert(a.node_id);
    EXPECT_EQ(a.gpus.size(), 4u);
  }
  EXPECT_EQ(used, (std::set<std::string>{"a", "b"}));
  q[0].nodes = 3;  // only two whole nodes are free
  plan = Schedule({nodes, q});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(Reason(plan, q, "gang"), "waiting for 3 nodes x 4 GPUs to be free");
}

// --- order -----------------------------------------------------------------

TEST(Order, FifoIsSubmitOrderAndTierComesFirst) {
  std::vector<NodeView> nodes = {Node("n", 1)};
  std::vector<PendingJob> q = {Job("late", 1, 5), Job("early", 1, 1), Job("spot", 1, 0)};
  q[2].tier = Tier::kSpot;
  SchedulerConfig cfg = Config(Policy::kFifo);
  Plan plan = Schedule({nodes, q, {}, {}, cfg});
  EXPECT_EQ(RankedIds(plan, q), (std::vector<std::string>{"early", "late", "spot"}));
  EXPECT_EQ(plan.placements[0].job_id, "early");
}

TEST(Order, FairShareInterleavesAccountsByUsage) {
  std::vector<NodeView> nodes = {Node("n", 1)};
  std::vector<PendingJob> q;
  for (int i = 0; i < 3; ++i) {
    q.push_back(Job("heavy" + std::to_string(i), 1, i));
    q.back().account = "heavy";
    q.push_back(Job("light" + std::to_string(i), 1, 10 + i));
    q.back().account = "light";
  }
  std::map<std::string, AccountShare> shares = {{"heavy", {1.0, 7200}}, {"light", {1.0, 0}}};
  SchedulerConfig cfg = Config(Policy::kFair);
  Plan plan = Schedule({nodes, q, {}, shares, cfg});
  // light is 2 GPU-hours behind: two of its jobs go first, then they alternate.
  EXPECT_EQ(RankedIds(plan, q), (std::vector<std::string>{"light0", "light1", "heavy0", "light2",
                                                          "heavy1", "heavy2"}));
  // A weight of 4 makes heavy's usage count a quarter: half an hour, less
  // than light's first job.
  shares["heavy"].weight = 4;
  plan = Schedule({nodes, q, {}, shares, cfg});
  EXPECT_EQ(RankedIds(plan, q)[1], "heavy0");
}

TEST(Order, PriorityWithinAnAccount) {
  std::vector<NodeView> nodes = {Node("n", 1)};
  std::vector<PendingJob> q = {Job("low", 1, 0), Job("high", 1, 5)};
  q[1].priority = 10;
  SchedulerConfig cfg = Config(Policy::kFair);
  Plan plan = Schedule({nodes, q, {}, {}, cfg});
  EXPECT_EQ(plan.placements[0].job_id, "high");
  cfg.policy = Policy::kFifo;  // the baseline ignores priority
  plan = Schedule({nodes, q, {}, {}, cfg});
  EXPECT_EQ(plan.placements[0].job_id, "low");
}

TEST(Order, TideRanksLeastAttainedServiceFirst) {
  std::vector<NodeView> nodes = {Node("n", 1)};
  std::vector<PendingJob> q = {Job("veteran", 1, 0), Job("fresh", 1, 9)};
  q[0].attained_gpu_s = 50'000;  // level 4 with the default thresholds
  SchedulerConfig cfg = Config(Policy::kTide);
  EXPECT_EQ(ServiceLevel(50'000, cfg), 4);
  EXPECT_EQ(ServiceLevel(59, cfg), 0);
  Plan plan = Schedule({nodes, q, {}, {}, cfg});
  EXPECT_EQ(plan.placements[0].job_id, "fresh");
  // Starvation: a job that waited long enough is promoted to level 0.
  cfg.starvation_factor = 2;
  q[0].last_run_ms = 1000;
  q[0].queued_since = 0;
  plan = Schedule({nodes, q, {}, {}, cfg, 5000});
  EXPECT_EQ(plan.placements[0].job_id, "veteran");
}

TEST(Order, SjfOracleRanksByKnownDuration) {
  std::vector<NodeView> nodes = {Node("n", 1)};
  std::vector<PendingJob> q = {Job("long", 1, 0), Job("short", 1, 9)};
  q[0].oracle_duration_ms = 10'000;
  q[1].oracle_duration_ms = 10;
  SchedulerConfig cfg = Config(Policy::kSjfOracle);
  Plan plan = Schedule({nodes, q, {}, {}, cfg});
  EXPECT_EQ(plan.placements[0].job_id, "short");
}

TEST(FairShareTest, UsageHalvesEveryHalfLife) {
  FairShare fs(1000);
  fs.Charge("a", 100, 0);
  EXPECT_DOUBLE_EQ(fs.Usage("a", 1000), 50);
  fs.Charge("a", 50, 1000);
  EXPECT_DOUBLE_EQ(fs.Usage("a", 2000), 50);
  EXPECT_DOUBLE_EQ(fs.Usage("nobody", 2000), 0);
  fs.SetWeight("b", 3);
  auto shares = fs.Shares(2000);
  EXPECT_DOUBLE_EQ(shares["b"].weight, 3);
  EXPECT_DOUBLE_EQ(shares["a"].usage_gpu_s, 50);
}

// --- backfill ----------------------------------------------------------------

// Node "n" has 4 GPUs, 2 of them busy until t=100 s; the head job wants all 4.
struct BackfillCase {
  std::vector<NodeView> nodes = {Node("n", 4)};
  std::vector<RunningJob> running;
  BackfillCase() {
    Use(nodes[0], {0, 1});
    RunningJob r;
    r.id = "busy";
    r.allocs = {{"n", {0, 1}}};
    r.expected_end = 100'000;
    running.push_back(r);
  }
};

TEST(Backfill, ShortJobMayJumpAheadLongOneMayNot) {
  BackfillCase c;
  std::vector<PendingJob> q = {Job("head", 4, 0), Job("short", 1, 1), Job("long", 1, 2),
                               Job("unknown", 1, 3)};
  q[1].max_runtime_ms = 50'000;
  q[2].max_runtime_ms = 500'000;
  SchedulerConfig cfg = Config(Policy::kFifo);
  Plan plan = Schedule({c.nodes, q, c.running, {}, cfg, 0});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "short");
  ASSERT_EQ(plan.reservations.size(), 1u);
  EXPECT_EQ(plan.reservations[0].job_id, "head");
  EXPECT_EQ(plan.reservations[0].start, 100'000);
  EXPECT_NE(Reason(plan, q, "long").find("reserved for jobs ranked ahead"), std::string::npos)
      << Reason(plan, q, "long");
  EXPECT_NE(Reason(plan, q, "unknown").find("set max_runtime"), std::string::npos);
}

TEST(Backfill, OffMeansStrictOrder) {
  BackfillCase c;
  std::vector<PendingJob> q = {Job("head", 4, 0), Job("short", 1, 1)};
  q[1].max_runtime_ms = 50'000;
  SchedulerConfig cfg = Config(Policy::kFifo, false);
  Plan plan = Schedule({c.nodes, q, c.running, {}, cfg, 0});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(Reason(plan, q, "short").rfind("behind head", 0), 0u);
}

TEST(Backfill, OtherNodesStayUsable) {
  BackfillCase c;
  c.nodes.push_back(Node("m", 2));
  std::vector<PendingJob> q = {Job("head", 4, 0), Job("any", 1, 1)};
  SchedulerConfig cfg = Config(Policy::kFifo);
  Plan plan = Schedule({c.nodes, q, c.running, {}, cfg, 0});
  ASSERT_NE(Find(plan, "any"), nullptr);
  EXPECT_EQ(Find(plan, "any")->allocs[0].node_id, "m");
}

// --- preemption ----------------------------------------------------------------

struct PreemptCase {
  std::vector<NodeView> nodes = {Node("n", 4)};
  std::vector<RunningJob> running;
  void Run(const std::string& id, std::vector<int> gpus, Tier tier, int64_t checkpoint = 0) {
    Use(nodes[0], gpus);
    RunningJob r;
    r.id = id;
    r.tier = tier;
    r.allocs = {{"n", gpus}};
    r.last_checkpoint = checkpoint;
    running.push_back(r);
  }
};

TEST(Preemption, OnDemandStopsTheFewestSpotJobs) {
  PreemptCase c;
  c.Run("spot-a", {0}, Tier::kSpot, 10);
  c.Run("spot-b", {1}, Tier::kSpot, 20);
  c.Run("spot-big", {2, 3}, Tier::kSpot, 5);
  std::vector<PendingJob> q = {Job("urgent", 2)};
  Plan plan = Schedule({c.nodes, q, c.running});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].victim_id, "spot-big");
  EXPECT_EQ(plan.preemptions[0].for_job_id, "urgent");
  EXPECT_EQ(plan.pending[0].kind, WaitKind::kPreempting);
  // One GPU: the most recently checkpointed spot job loses least.
  q[0].gpu_count = 1;
  plan = Schedule({c.nodes, q, c.running});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].victim_id, "spot-b");
}

TEST(Preemption, AcrossNodesTheBetterVictimWinsOverTheBetterNode) {
  // Two nodes, one spot job on each; the node placement prefers (the
  // cheaper) holds the job that checkpointed long ago.
  std::vector<NodeView> nodes = {Node("cheap", 1), Node("dear", 1)};
  nodes[1].price = 2'000'000;
  std::vector<RunningJob> running;
  auto run = [&](const std::string& id, size_t node, int64_t checkpoint) {
    Use(nodes[node], {0});
    RunningJob r;
    r.id = id;
    r.tier = Tier::kSpot;
    r.allocs = {{nodes[node].id, {0}}};
    r.last_checkpoint = checkpoint;
    running.push_back(r);
  };
  run("old-ckpt", 0, 10);
  run("new-ckpt", 1, 90);
  std::vector<PendingJob> q = {Job("urgent", 1)};
  Plan plan = Schedule({nodes, q, running});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].victim_id, "new-ckpt") << "it loses least by stopping";
}

TEST(Preemption, NeverForSpotAndNeverOnDemandVictims) {
  PreemptCase c;
  c.Run("od", {0, 1, 2, 3}, Tier::kOnDemand);
  std::vector<PendingJob> q = {Job("ondemand", 1), Job("spot", 1)};
  q[1].tier = Tier::kSpot;
  Plan plan = Schedule({c.nodes, q, c.running});
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_EQ(plan.pending[0].kind, WaitKind::kResources);
}

TEST(Preemption, StoppingWorkIsNotStoppedTwice) {
  PreemptCase c;
  c.Run("spot", {0, 1, 2, 3}, Tier::kSpot);
  c.running[0].stopping = true;
  std::vector<PendingJob> q = {Job("urgent", 4), Job("next", 1, 1)};
  Plan plan = Schedule({c.nodes, q, c.running});
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_EQ(Reason(plan, q, "urgent"), "waiting for preempted work to stop on its node");
}

TEST(Preemption, TideStopsHigherServiceLevelsAfterTheWait) {
  PreemptCase c;
  c.Run("veteran", {0, 1, 2, 3}, Tier::kOnDemand);
  c.running[0].attained_gpu_s = 100'000;
  c.running[0].preemptible = true;
  std::vector<PendingJob> q = {Job("fresh", 1)};
  SchedulerConfig cfg = Config(Policy::kTide);
  cfg.las_preempt_after_ms = 60'000;
  Plan plan = Schedule({c.nodes, q, c.running, {}, cfg, 30'000});
  EXPECT_TRUE(plan.preemptions.empty());  // has not waited long enough
  plan = Schedule({c.nodes, q, c.running, {}, cfg, 60'000});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  c.running[0].preemptible = false;  // a job that cannot checkpoint is left alone
  plan = Schedule({c.nodes, q, c.running, {}, cfg, 60'000});
  EXPECT_TRUE(plan.preemptions.empty());
}

// --- properties on random clusters and queues ------------------------------------

struct World {
  std::vector<NodeView> nodes;
  std::vector<RunningJob> running;
  std::vector<PendingJob> queue;
  std::map<std::string, AccountShare> shares;
  SchedulerConfig cfg;
  int64_t now = 1'000'000;
};

World RandomWorld(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> models = {"RTX4090", "A100", "H100"};
  World w;
  w.cfg.policy = static_cast<Policy>(pick(0, 3));
  w.cfg.backfill = pick(0, 1) == 1;
  w.cfg.las_preempt_after_ms = 0;
  int nodes = pick(1, 12);
  for (int i = 0; i < nodes; ++i) {
    NodeView n = Node("n" + std::to_string(i), pick(1, 8), models[static_cast<size_t>(pick(0, 2))],
                      pick(1, 3) * 24576);
    n.price = pick(0, 3) * 1'000'000;
    n.reliability = pick(5, 10) / 10.0;
    n.draining = pick(0, 15) == 0;
    n.labels["region"] = pick(0, 1) ? "eu" : "us";
    w.nodes.push_back(n);
  }
  int r = 0;
  for (auto& n : w.nodes) {  // random running jobs on random GPUs
    for (auto& g : n.gpus) {
      if (pick(0, 2) != 0) continue;
      g.free = false;
      RunningJob job;
      job.id = "r" + std::to_string(r++);
      job.account = "acct" + std::to_string(pick(0, 2));
      job.tier = pick(0, 1) ? Tier::kSpot : Tier::kOnDemand;
      job.allocs = {{n.id, {g.index}}};
      job.expected_end = pick(0, 1) ? w.now + pick(1, 100) * 1000 : 0;
      job.attained_gpu_s = pick(0, 50'000);
      job.preemptible = pick(0, 1) == 1;
      job.stopping = pick(0, 10) == 0;
      job.last_checkpoint = pick(0, 1000);
      w.running.push_back(job);
    }
  }
  int jobs = pick(0, 40);
  for (int i = 0; i < jobs; ++i) {
    PendingJob j = Job("q" + std::to_string(i), pick(1, 8), pick(0, 1000));
    j.nodes = pick(0, 4) == 0 ? pick(2, 3) : 1;
    if (pick(0, 2) == 0) j.gpu_types = {models[static_cast<size_t>(pick(0, 2))]};
    if (pick(0, 4) == 0) j.gpu_memory_mb = 49152;
    if (pick(0, 4) == 0) j.constraints["region"] = "eu";
    if (pick(0, 4) == 0) j.max_price = 2'000'000;
    j.tier = pick(0, 1) ? Tier::kSpot : Tier::kOnDemand;
    j.priority = pick(0, 2);
    j.account = "acct" + std::to_string(pick(0, 2));
    j.attained_gpu_s = pick(0, 3) == 0 ? pick(0, 50'000) : 0;
    j.max_runtime_ms = pick(0, 1) ? pick(1, 200) * 1000 : 0;
    w.queue.push_back(j);
  }
  for (int a = 0; a < 3; ++a) {
    w.shares["acct" + std::to_string(a)] = {static_cast<double>(pick(1, 3)),
                                            static_cast<double>(pick(0, 100'000))};
  }
  return w;
}

TEST(Properties, RandomPlansAreSound) {
  for (uint32_t seed = 1; seed <= 1500; ++seed) {
    World w = RandomWorld(seed);
    SCOPED_TRACE("seed " + std::to_string(seed));
    Plan plan = Schedule({w.nodes, w.queue, w.running, w.shares, w.cfg, w.now});
    std::map<std::string, const NodeView*> nodes;
    for (auto& n : w.nodes) nodes[n.id] = &n;
    std::map<std::string, const PendingJob*> jobs;
    for (auto& j : w.queue) jobs[j.id] = &j;
    std::map<std::string, size_t> rank;
    for (size_t i = 0; i < plan.ranked.size(); ++i) rank[w.queue[plan.ranked[i]].id] = i;
    // node -> (rank of the holder, reservation start)
    std::map<std::string, std::pair<size_t, int64_t>> reserved;
    for (auto& r : plan.reservations) {
      for (auto& n : r.node_ids) {
        EXPECT_FALSE(reserved.count(n)) << "two reservations on " << n;
        reserved[n] = {rank.at(r.job_id), r.start == 0 ? w.now : r.start};
      }
    }
    std::set<std::pair<std::string, int>> taken;
    std::set<std::string> placed;
    for (auto& p : plan.placements) {
      const PendingJob& job = *jobs.at(p.job_id);
      EXPECT_TRUE(placed.insert(p.job_id).second) << "placed twice";
      // Gang: exactly `nodes` distinct nodes, gpu_count GPUs on each.
      ASSERT_EQ(static_cast<int>(p.allocs.size()), job.nodes);
      std::set<std::string> distinct;
      for (auto& a : p.allocs) {
        distinct.insert(a.node_id);
        const NodeView& n = *nodes.at(a.node_id);
        EXPECT_GT(UsableGpus(job, n), 0) << "infeasible node";
        ASSERT_EQ(static_cast<int>(a.gpus.size()), job.gpu_count);
        for (int g : a.gpus) {
          const GpuSlot& slot = n.gpus[static_cast<size_t>(g)];
          EXPECT_TRUE(slot.free) << "GPU already in use";
          EXPECT_TRUE(GpuMatches(job, slot)) << "GPU does not match";
          EXPECT_TRUE(taken.insert({a.node_id, g}).second) << "GPU allocated twice";
        }
        // Backfill never delays a reservation of a job ranked ahead.
        auto res = reserved.find(a.node_id);
        if (res != reserved.end() && res->second.first < rank.at(job.id)) {
          EXPECT_GT(job.max_runtime_ms, 0);
          EXPECT_LE(w.now + job.max_runtime_ms, res->second.second);
        }
      }
      EXPECT_EQ(static_cast<int>(distinct.size()), job.nodes);
    }
    // Every queued job is either placed or has a reason.
    EXPECT_EQ(plan.placements.size() + plan.pending.size(), w.queue.size());
    for (auto& p : plan.pending) EXPECT_FALSE(PendingReason(plan, p).empty());
    // Preemption frees enough: for each job that caused one, free GPUs plus
    // the GPUs of its victims and of stopping work cover it.
    std::map<std::string, std::set<std::string>> victims;
    for (auto& pre : plan.preemptions) victims[pre.for_job_id].insert(pre.victim_id);
    for (auto& [job_id, ids] : victims) {
      const PendingJob& job = *jobs.at(job_id);
      int nodes_ok = 0;
      for (auto& n : w.nodes) {
        if (UsableGpus(job, n) == 0) continue;
        int have = 0;
        for (auto& g : n.gpus) have += g.free && GpuMatches(job, g);
        for (auto& r : w.running) {
          if (!ids.count(r.id) && !r.stopping) continue;
          for (auto& a : r.allocs) {
            if (a.node_id != n.id) continue;
            for (int g : a.gpus) have += GpuMatches(job, n.gpus[static_cast<size_t>(g)]);
          }
        }
        nodes_ok += have >= job.gpu_count;
      }
      EXPECT_GE(nodes_ok, job.nodes) << job_id << " preempted too little";
      for (auto& v : ids) {
        for (auto& r : w.running) {
          if (r.id != v) continue;
          EXPECT_FALSE(r.stopping);
          EXPECT_TRUE(r.tier == Tier::kSpot || r.preemptible);
          if (job.tier == Tier::kSpot) {
            EXPECT_EQ(r.tier, Tier::kSpot);
          }
        }
      }
    }
    // Same input and seed, same plan.
    Plan again = Schedule({w.nodes, w.queue, w.running, w.shares, w.cfg, w.now});
    ASSERT_EQ(again.placements.size(), plan.placements.size());
    for (size_t i = 0; i < plan.placements.size(); ++i) {
      EXPECT_EQ(again.placements[i].job_id, plan.placements[i].job_id);
      ASSERT_EQ(again.placements[i].allocs.size(), plan.placements[i].allocs.size());
      for (size_t k = 0; k < plan.placements[i].allocs.size(); ++k) {
        EXPECT_EQ(again.placements[i].allocs[k].node_id, plan.placements[i].allocs[k].node_id);
        EXPECT_EQ(again.placements[i].allocs[k].gpus, plan.placements[i].allocs[k].gpus);
      }
    }
    EXPECT_EQ(again.ranked, plan.ranked);
    EXPECT_EQ(again.preemptions.size(), plan.preemptions.size());
  }
}

TEST(Properties, QueueOrderOfInputDoesNotMatter) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    World w = RandomWorld(seed);
    Plan a = Schedule({w.nodes, w.queue, w.running, w.shares, w.cfg, w.now});
    std::vector<PendingJob> reversed(w.queue.rbegin(), w.queue.rend());
    Plan b = Schedule({w.nodes, reversed, w.running, w.shares, w.cfg, w.now});
    ASSERT_EQ(a.placements.size(), b.placements.size()) << "seed " << seed;
    for (size_t i = 0; i < a.placements.size(); ++i) {
      EXPECT_EQ(a.placements[i].job_id, b.placements[i].job_id) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace tide::sched
