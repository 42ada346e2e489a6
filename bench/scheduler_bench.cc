// Scheduler core benchmarks (Google Benchmark): placements per second on a
// large cluster, one pass over a long queue, and a full replay of the
// Philly trace through `tide sim`'s engine.
//
//   build/bench/tide-sched-bench
//   TIDE_TRACES=../shared/traces build/bench/tide-sched-bench --benchmark_filter=Replay
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "scheduler/replay/simulate.h"
#include "scheduler/replay/trace.h"
#include "scheduler/schedule.h"

namespace tide::sched {
namespace {

const char* kModels[] = {"RTX4090", "A100", "H100", "L40S"};

// `n` nodes of 8 GPUs, models in turn, with a region label and a price.
std::vector<NodeView> Cluster(int n) {
  std::vector<NodeView> nodes;
  nodes.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    NodeView v;
    v.id = v.name = "node-" + std::to_string(i);
    std::string model = kModels[i % 4];
    for (int g = 0; g < 8; ++g) v.gpus.push_back({g, model, 80 * 1024, true});
    v.labels["region"] = i % 2 ? "eu" : "us";
    v.price = (1 + i % 3) * 1'000'000;
    nodes.push_back(std::move(v));
  }
  return nodes;
}

// `n` single-GPU jobs; one in four asks for a model, one in eight a region.
std::vector<PendingJob> Queue(int n) {
  std::vector<PendingJob> q;
  q.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    PendingJob j;
    j.id = "job-" + std::to_string(i);
    j.account = "acct-" + std::to_string(i % 20);
    j.submitted_at = i;
    if (i % 4 == 0) j.gpu_types = {kModels[(i / 4) % 4]};
    if (i % 8 == 1) j.constraints["region"] = "eu";
    q.push_back(std::move(j));
  }
  return q;
}

void BM_Place50kOn5kNodes(benchmark::State& state) {
  SchedulerConfig cfg;
  cfg.policy = static_cast<Policy>(state.range(0));
  std::vector<NodeView> nodes = Cluster(5000);
  std::vector<PendingJob> queue = Queue(50'000);
  size_t placed = 0;
  for (auto _ : state) {
    Plan plan = Schedule({nodes, queue, {}, {}, cfg, 0});
    placed += plan.placements.size();
    benchmark::DoNotOptimize(plan);
  }
  state.SetLabel(PolicyName(cfg.policy));
  state.counters["placements_per_s"] =
      benchmark::Counter(static_cast<double>(placed), benchmark::Counter::kIsRate);
  state.counters["placements"] = static_cast<double>(placed) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Place50kOn5kNodes)
    ->Arg(static_cast<int>(Policy::kFifo))
    ->Arg(static_cast<int>(Policy::kTide))
    ->Unit(benchmark::kMillisecond);

// A full cluster (every GPU busy, half the work spot) and 100,000 jobs
// waiting: the pass ranks them all, tries preemption once per shape and
// gives each a reason.
void BM_Pass100kPending(benchmark::State& state) {
  SchedulerConfig cfg;
  std::vector<NodeView> nodes = Cluster(1000);
  std::vector<RunningJob> running;
  for (auto& n : nodes) {
    for (auto& g : n.gpus) {
      g.free = false;
      RunningJob r;
      r.id = n.id + "/" + std::to_string(g.index);
      r.account = "acct-0";
      r.allocs = {{n.id, {g.index}}};
      running.push_back(std::move(r));
    }
  }
  struct mallinfo2 before = mallinfo2();
  std::vector<PendingJob> queue = Queue(100'000);
  struct mallinfo2 after = mallinfo2();
  size_t plan_bytes = 0;
  for (auto _ : state) {
    struct mallinfo2 b = mallinfo2();
    Plan plan = Schedule({nodes, queue, running, {}, cfg, 0});
    struct mallinfo2 a = mallinfo2();
    plan_bytes = a.uordblks - b.uordblks;
    benchmark::DoNotOptimize(plan);
  }
  state.counters["input_bytes_per_job"] =
      static_cast<double>(after.uordblks - before.uordblks) / 100'000.0;
  state.counters["plan_bytes_per_job"] = static_cast<double>(plan_bytes) / 100'000.0;
}
BENCHMARK(BM_Pass100kPending)->Unit(benchmark::kMillisecond);

// The whole 82,247-job Philly trace on its 352 nodes, each VC its own
// partition, under one policy per run.
void BM_ReplayPhilly(benchmark::State& state) {
  const char* root = std::getenv("TIDE_TRACES");
  std::string dir = std::string(root ? root : "../shared/traces") + "/philly-pollux/";
  std::ifstream tin(dir + "philly.csv"), cin(dir + "cluster/philly_vc_nodes.csv");
  if (!tin || !cin) {
    state.SkipWithError(("no Philly trace under " + dir + " (set TIDE_TRACES)").c_str());
    return;
  }
  auto trace = replay::LoadTrace(tin, "philly.csv", "philly");
  auto nodes = replay::LoadCluster(cin, "philly_vc_nodes.csv");
  if (!trace.ok() || !nodes.ok()) {
    state.SkipWithError("cannot load the Philly trace");
    return;
  }
  replay::SimOptions opt;
  opt.config.policy = static_cast<Policy>(state.range(0));
  opt.config.backfill = opt.config.policy == Policy::kTide;
  opt.partition_label = "vc";
  int64_t jobs = 0;
  for (auto _ : state) {
    auto r = replay::Simulate(trace->jobs, *nodes, opt);
    jobs += r.jobs;
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(PolicyName(opt.config.policy));
  state.counters["jobs"] = static_cast<double>(jobs) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_ReplayPhilly)
    ->Arg(static_cast<int>(Policy::kFifo))
    ->Arg(static_cast<int>(Policy::kTide))
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace tide::sched

BENCHMARK_MAIN();
