#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "scheduler/replay/simulate.h"
#include "scheduler/replay/trace.h"

namespace tide::sched::replay {
namespace {

Trace Csv(const std::string& text) {
  std::istringstream in(text);
  auto t = LoadTrace(in, "t.csv", "csv");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trace{};
}

SimOptions Policy(sched::Policy p, bool backfill = false) {
  SimOptions o;
  o.config.policy = p;
  o.config.backfill = backfill;
  o.config.las_preempt_after_ms = 0;
  return o;
}

TEST(Cluster, ParsesSpecs) {
  auto c = ParseCluster("2x8:V100,1x4:A100-80GB");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].gpus.size(), 8u);
  EXPECT_EQ((*c)[0].gpus[0].model, "V100");
  EXPECT_EQ((*c)[2].gpus[0].model, "A100");
  EXPECT_EQ((*c)[2].gpus[0].memory_mb, 80 * 1024);
  for (const char* bad : {"", "8", "x8", "2x", "2x0", "2x8:A100-xxGB", "2x100", "2x8@", "2x8:V100@x",
                          "2x8@-1", "2x8@nan", "2x8:V100@1.5.2"}) {
    EXPECT_FALSE(ParseCluster(bad).ok()) << bad;
  }
  c = ParseCluster("1x8:A100-80GB@10,2x4@0.4,1x2:V100");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 4u);
  EXPECT_EQ((*c)[0].price, 10'000'000);
  EXPECT_EQ((*c)[0].gpus[0].memory_mb, 80 * 1024);
  EXPECT_EQ((*c)[1].price, 400'000);
  EXPECT_EQ((*c)[2].gpus.size(), 4u);
  EXPECT_EQ((*c)[3].price, 0);
  auto e = ParseCluster("2x8:V100@cheap");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("bad price \"cheap\" in \"2x8:V100@cheap\""), std::string::npos)
      << e.status().message();
}

TEST(Cluster, LoadsPhillyVcsAndAlibabaNodes) {
  std::istringstream vc("vc,node num\nabc,2\nxyz,1\n");
  auto c = LoadCluster(vc, "vc.csv");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].labels.at("vc"), "abc");
  EXPECT_EQ((*c)[2].gpus.size(), 8u);
  std::istringstream ali(
      "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,786432,8,V100M32\n");
  c = LoadCluster(ali, "nodes.csv");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 1u);  // the CPU-only node is left out
  EXPECT_EQ((*c)[0].cpus, 96);
  EXPECT_EQ((*c)[0].gpus[0].model, "V100M32");
  std::istringstream bad("vc,node num\nabc,two\n");
  auto e = LoadCluster(bad, "vc.csv");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "vc.csv:2: node num \"two\" is not a positive count");
  std::istringstream unknown("a,b\n1,2\n");
  EXPECT_FALSE(LoadCluster(unknown, "x.csv").ok());
  std::vector<NodeView> four = *ParseCluster("4x8");
  EXPECT_EQ(ScaleCluster(four, 0.5).size(), 2u);
  EXPECT_EQ(ScaleCluster(four, 0.01).size(), 1u);
}

TEST(Trace, ErrorsNameTheLineAndField) {
  auto err = [](const std::string& text, const std::string& format) {
    std::istringstream in(text);
    auto t = LoadTrace(in, "t.csv", format);
    return t.ok() ? std::string("ok") : t.status().message();
  };
  EXPECT_EQ(err("", "csv"), "t.csv:1: empty file");
  EXPECT_EQ(err("submit_time,gpus\n1,2\n", "csv"), "t.csv:1: header has no \"duration\" column");
  EXPECT_EQ(err("submit_time,duration,gpus\n0,10,1\nx,10,1\n", "csv"),
            "t.csv:3: submit_time \"x\" is not a number of seconds");
  EXPECT_EQ(err("submit_time,duration,gpus\n0,-5,1\n", "csv"),
            "t.csv:2: duration \"-5\" is not a number of seconds");
  EXPECT_EQ(err("submit_time,duration,gpus\n0,5,0\n", "csv"),
            "t.csv:2: gpus \"0\" is not a positive count");
  EXPECT_EQ(err("submit_time,duration,gpus\n0,5\n", "csv"), "t.csv:2: has 2 columns, the header 3");
  EXPECT_EQ(err("timestamp,duration,num_gpus,gpu_time,cluster\n2017-13-45 x,1,1,1,a\n", "philly"),
            "t.csv:2: timestamp \"2017-13-45 x\" is not YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(err("a\n", "nope"),
            "unknown trace format \"nope\": use csv, philly, tiresias, chronus or alibaba-openb");
}

TEST(Trace, ReadsEachFormat) {
  std::istringstream philly(
      "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:01:00,60.5,2,121,vc1\n"
      "2017-10-01 00:00:00,10,1,10,vc2\n");
  auto p = LoadTrace(philly, "p.csv", "philly");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->jobs.size(), 2u);
  EXPECT_EQ(p->jobs[0].submit_s, 60);
  EXPECT_EQ(p->jobs[0].duration_s, 61);
  EXPECT_EQ(p->jobs[0].account, "vc1");
  EXPECT_GT(p->jobs[0].submit_epoch_s, 0);
  std::istringstream chronus(
      "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval\n"
      "0,vc_a,1,5,1,x,96,5\n1,vc_b,0,7,1,x,10,5\n");
  auto c = LoadTrace(chronus, "c.csv", "chronus");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->jobs.size(), 1u);
  EXPECT_EQ(c->notes.size(), 1u);  // the 0-GPU row
  std::istringstream ali(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p0,12000,16384,1,460,T4|P100,LS,Running,100,900,200\n"
      "p1,1000,100,0,0,,LS,Running,0,10,0\n");
  auto a = LoadTrace(ali, "a.csv", "alibaba-openb");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->jobs.size(), 1u);
  EXPECT_TRUE(a->jobs[0].fractional);
  EXPECT_EQ(a->jobs[0].duration_s, 700);
  EXPECT_EQ(a->jobs[0].gpu_types, (std::vector<std::string>{"T4", "P100"}));
  EXPECT_EQ(a->jobs[0].cpus, 12);
  EXPECT_EQ(a->notes.size(), 2u);
}

// One node, two GPUs, worked out by hand.
TEST(Simulate, FifoByHand) {
  Trace t = Csv("submit_time,duration,gpus\n0,100,2\n10,50,1\n20,10,1\n");
  auto r = Simulate(t.jobs, *ParseCluster("1x2"), Policy(sched::Policy::kFifo));
  ASSERT_EQ(r.jobs, 3);
  EXPECT_EQ(r.per_job[0].finish_s, 100);
  EXPECT_EQ(r.per_job[1].start_s, 100);
  EXPECT_EQ(r.per_job[1].finish_s, 150);
  EXPECT_EQ(r.per_job[2].start_s, 100);
  EXPECT_EQ(r.per_job[2].finish_s, 110);
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (100.0 + 140.0 + 90.0) / 3);
  EXPECT_EQ(r.makespan_s, 150);
  EXPECT_NEAR(r.gpu_utilization, (200.0 + 50 + 10) / (2 * 150.0), 1e-9);
}

// A dear A100 node and a cheap RTX4090 node. A 4-GPU A100 job comes
// first, then a 1-GPU job that fits anywhere, then an 8-GPU job that fits
// anywhere. Price first sends the 1-GPU job to the cheap node and so
// splits it: the 8-GPU job waits for the A100 node. Pack first puts the
// 1-GPU job beside the 4 and the 8-GPU job starts at once, cheaply.
TEST(Simulate, PriceFirstPaysLessForSmallJobsAndFragmentsMore) {
  Trace t = Csv(
      "submit_time,duration,gpus,gpu_type\n"
      "0,1000,4,A100\n"
      "10,1000,1,\n"
      "20,100,8,\n");
  auto cluster = ParseCluster("1x8:A100@10,1x8:RTX4090@0.4");
  ASSERT_TRUE(cluster.ok());
  SimOptions price = Policy(sched::Policy::kFifo);
  SimResult p = Simulate(t.jobs, *cluster, price);
  ASSERT_EQ(p.jobs, 3);
  EXPECT_EQ(p.per_job[2].start_s, 1000);  // on the A100 node, once the 4-GPU job ended
  EXPECT_EQ(p.whole_node_jobs, 1);
  EXPECT_DOUBLE_EQ(p.avg_queue_whole_node_s, 980);
  // 4x1000 s at 10 + 1x1000 s at 0.4 + 8x100 s at 10, per GPU-hour.
  EXPECT_NEAR(p.cost_credits, (40'000 + 400 + 8'000) / 3600.0, 1e-9);
  // Idle GPU-seconds 11,800, of them 11,000 on partly used nodes.
  EXPECT_NEAR(p.fragmentation, 11'000.0 / 11'800, 1e-12);

  SimOptions pack = price;
  pack.config.placement = sched::PlacementOrder::kPackFirst;
  SimResult k = Simulate(t.jobs, *cluster, pack);
  ASSERT_EQ(k.jobs, 3);
  EXPECT_EQ(k.per_job[2].start_s, 20);
  EXPECT_DOUBLE_EQ(k.avg_queue_whole_node_s, 0);
  // The 1-GPU job pays the A100's price: 4x1000 + 1x1000 at 10, 8x100 at 0.4.
  EXPECT_NEAR(k.cost_credits, (40'000 + 10'000 + 320) / 3600.0, 1e-9);
  EXPECT_NEAR(k.fragmentation, 3'080.0 / 10'360, 1e-12);
}

TEST(Simulate, SjfOracleRunsShortJobsFirst) {
  // While the first job runs, a long and a short job queue for the node.
  Trace t = Csv("submit_time,duration,gpus\n0,100,1\n1,1000,1\n2,10,1\n");
  auto fifo = Simulate(t.jobs, *ParseCluster("1x1"), Policy(sched::Policy::kFifo));
  auto sjf = Simulate(t.jobs, *ParseCluster("1x1"), Policy(sched::Policy::kSjfOracle));
  EXPECT_EQ(fifo.per_job[2].start_s, 1100);
  EXPECT_EQ(sjf.per_job[2].start_s, 100);
  EXPECT_LT(sjf.avg_jct_s, fifo.avg_jct_s);
}

TEST(Simulate, TidePreemptsLongRunningWorkAndPaysTheRestart) {
  // A long job holds the only GPU; a short one arrives once the long one has
  // passed the first service level and preempts it.
  Trace t = Csv("submit_time,duration,gpus\n0,1000,1\n100,10,1\n");
  SimOptions o = Policy(sched::Policy::kTide, true);
  o.config.las_thresholds_gpu_s = {50};
  o.restart_penalty_s = 30;
  auto r = Simulate(t.jobs, *ParseCluster("1x1"), o);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.per_job[1].start_s, 100);
  EXPECT_EQ(r.per_job[1].finish_s, 110);
  EXPECT_EQ(r.per_job[0].attempts, 2);
  // 100 s done before, 900 s left, plus the 30 s restart from t=110.
  EXPECT_EQ(r.per_job[0].finish_s, 110 + 30 + 900);
}

TEST(Simulate, GangsSpanNodesAndTooBigJobsAreReported) {
  Trace t = Csv("submit_time,duration,gpus\n0,10,16\n0,10,64\n");
  auto r = Simulate(t.jobs, *ParseCluster("2x8"), Policy(sched::Policy::kFifo));
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.per_job[0].finish_s, 10);
  EXPECT_EQ(r.unschedulable, 1);
  EXPECT_EQ(r.per_job[1].note, "2 of the 8 nodes needed have 8 GPUs");
}

TEST(Simulate, PartitionsKeepAccountsApart) {
  Trace t = Csv("submit_time,duration,gpus,account\n0,100,1,a\n0,100,1,a\n0,100,1,b\n0,5,1,c\n");
  std::istringstream vc("vc,node num\na,1\nb,1\n");
  auto nodes = *LoadCluster(vc, "vc.csv");
  for (auto& n : nodes) n.gpus.resize(1);
  SimOptions o = Policy(sched::Policy::kFifo);
  o.partition_label = "vc";
  auto r = Simulate(t.jobs, nodes, o);
  EXPECT_EQ(r.per_job[1].start_s, 100);  // waits for a's own node, not b's
  EXPECT_EQ(r.per_job[2].start_s, 0);
  EXPECT_EQ(r.per_job[3].note, "no partition vc=c");
  EXPECT_EQ(r.per_account.size(), 2u);
}

TEST(Simulate, SameTraceSameResult) {
  std::string text = "submit_time,duration,gpus,account\n";
  for (int i = 0; i < 300; ++i) {
    text += std::to_string(i * 7 % 500) + "," + std::to_string(10 + (i * 37) % 900) + "," +
            std::to_string(1 + i % 4) + ",acct" + std::to_string(i % 3) + "\n";
  }
  Trace t = Csv(text);
  for (auto p : {sched::Policy::kFifo, sched::Policy::kFair, sched::Policy::kTide,
                 sched::Policy::kSjfOracle}) {
    auto a = Simulate(t.jobs, *ParseCluster("3x4"), Policy(p, true));
    auto b = Simulate(t.jobs, *ParseCluster("3x4"), Policy(p, true));
    EXPECT_EQ(a.jobs, 300);
    EXPECT_EQ(a.avg_jct_s, b.avg_jct_s);
    EXPECT_EQ(a.preemptions, b.preemptions);
    for (size_t i = 0; i < a.per_job.size(); ++i) {
      EXPECT_EQ(a.per_job[i].finish_s, b.per_job[i].finish_s);
      EXPECT_GE(a.per_job[i].finish_s - a.per_job[i].start_s, t.jobs[i].duration_s);
    }
  }
}

// Golden replays: a small three-account trace on two 8-GPU nodes under each
// policy, job by job, against the results in testdata/. A change to the
// core that moves any start or finish shows here; after checking the
// change is intended, rewrite them with TIDE_UPDATE_GOLDEN=1.
TEST(Simulate, GoldenReplays) {
  std::ifstream in(std::string(TIDE_TESTDATA) + "/small.csv");
  ASSERT_TRUE(in) << "missing testdata";
  auto trace = LoadTrace(in, "small.csv", "csv");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  for (auto p : {sched::Policy::kFifo, sched::Policy::kFair, sched::Policy::kTide,
                 sched::Policy::kSjfOracle}) {
    SimOptions o;
    o.config.policy = p;
    o.config.backfill = p == sched::Policy::kFair || p == sched::Policy::kTide;
    auto r = Simulate(trace->jobs, *ParseCluster("2x8"), o);
    std::string got = "id,start_s,finish_s,attempts\n";
    for (const auto& j : r.per_job) {
      got += j.id + "," + std::to_string(j.start_s) + "," + std::to_string(j.finish_s) + "," +
             std::to_string(j.attempts) + "\n";
    }
    std::string path = std::string(TIDE_TESTDATA) + "/small." + PolicyName(p) + ".golden";
    if (std::getenv("TIDE_UPDATE_GOLDEN")) {
      std::ofstream(path) << got;
      continue;
    }
    std::ifstream want_in(path);
    ASSERT_TRUE(want_in) << "no " << path << " (run with TIDE_UPDATE_GOLDEN=1 to write it)";
    std::stringstream want;
    want << want_in.rdbuf();
    EXPECT_EQ(got, want.str()) << PolicyName(p);
  }
}

}  // namespace
}  // namespace tide::sched::replay
