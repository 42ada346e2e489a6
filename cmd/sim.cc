// `tide sim`: replays a cluster trace in virtual time through the same
// Schedule() the server runs and prints job completion times, queueing
// delay, makespan, GPU utilisation and fairness per account.
#include "cmd/sim.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "common/duration.h"
#include "scheduler/replay/simulate.h"

namespace tide::cmd {

namespace {

using sched::NodeView;

struct SimFlags {
  std::string trace;
  std::string format = "csv";
  std::string cluster;
  double scale = 1.0;
  std::string policy = "tide";
  std::string backfill = "auto";
  std::string placement = "price-first";
  std::string preemption = "on";
  std::string restart_penalty = "60s";
  double walltime_factor = 0;
  std::string partition_by = "auto";
  std::string since, until;
  std::string las_thresholds;
  std::string half_life = "7d";
  std::string preempt_after = "5m";
  std::string output = "table";
  std::string per_job;
  uint64_t seed = 0;
};

int Fail(const std::string& msg, int code = cli::kExitError) {
  std::cerr << "error: " << msg << "\n";
  return code;
}

bool ParseDay(const std::string& s, int64_t* out) {
  struct tm tm {};
  const char* end = strptime(s.c_str(), "%Y-%m-%d", &tm);
  if (!end || *end != '\0') return false;
  *out = static_cast<int64_t>(timegm(&tm));
  return true;
}

Result<std::vector<NodeView>> Cluster(const std::string& spec) {
  struct stat st {};
  if (spec.find('x') == std::string::npos || stat(spec.c_str(), &st) == 0) {
    std::ifstream in(spec);
    if (!in) return Status::InvalidArgument("cannot read cluster file " + spec, "cluster");
    return sched::replay::LoadCluster(in, spec);
  }
  return sched::replay::ParseCluster(spec);
}

std::string Factor(double f) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", f);
  return buf;
}

std::string Seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.0f s", s);
  return buf;
}

int RunSim(const SimFlags& f) {
  sched::replay::SimOptions opt;
  if (!sched::ParsePolicy(f.policy, &opt.config.policy)) {
    return Fail("--policy: unknown policy \"" + f.policy + "\" (fifo, fair, tide, sjf-oracle)",
                cli::kExitUsage);
  }
  const bool strict = opt.config.policy == sched::Policy::kFifo ||
                      opt.config.policy == sched::Policy::kSjfOracle;
  opt.config.backfill = f.backfill == "auto" ? !strict : f.backfill == "on";
  opt.config.preemption = f.preemption == "on";
  opt.config.seed = f.seed;
  opt.config.placement =
      f.placement == "pack-first" ? sched::PlacementOrder::kPackFirst : sched::PlacementOrder::kPriceFirst;
  opt.walltime_factor = f.walltime_factor;
  if (f.walltime_factor != 0 && f.walltime_factor < 1) {
    return Fail("--walltime-factor must be at least 1 (a limit below the run time kills the job)",
                cli::kExitUsage);
  }
  auto penalty = ParseDurationSeconds(f.restart_penalty);
  if (!penalty.ok()) return Fail("--restart-penalty: " + penalty.status().message(), cli::kExitUsage);
  opt.restart_penalty_s = *penalty;
  auto half_life = ParseDurationSeconds(f.half_life);
  if (!half_life.ok()) return Fail("--half-life: " + half_life.status().message(), cli::kExitUsage);
  opt.fair_half_life_s = *half_life;
  auto preempt_after = ParseDurationSeconds(f.preempt_after);
  if (!preempt_after.ok()) return Fail("--preempt-after: " + preempt_after.status().message(), cli::kExitUsage);
  opt.config.las_preempt_after_ms = *preempt_after * 1000;
  if (!f.las_thresholds.empty()) {
    opt.config.las_thresholds_gpu_s.clear();
    std::stringstream ss(f.las_thresholds);
    std::string part;
    int64_t prev = 0;
    while (std::getline(ss, part, ',')) {
      auto v = ParseDurationSeconds(part);
      if (!v.ok() || *v <= prev) {
        return Fail("--las-thresholds: \"" + part +
                        "\" is not a GPU-time above the previous one (e.g. 1h,10h)",
                    cli::kExitUsage);
      }
      opt.config.las_thresholds_gpu_s.push_back(*v);
      prev = *v;
    }
  }

  std::ifstream in(f.trace);
  if (!in) return Fail("cannot read trace " + f.trace);
  auto trace = sched::replay::LoadTrace(in, f.trace, f.format);
  if (!trace.ok()) return Fail(trace.status().message());
  auto nodes = Cluster(f.cluster);
  if (!nodes.ok()) return Fail("--cluster: " + nodes.status().message(), cli::kExitUsage);
  if (f.scale <= 0 || f.scale > 1) return Fail("--scale must be in (0, 1]", cli::kExitUsage);
  std::vector<NodeView> cluster = f.scale < 1 ? sched::replay::ScaleCluster(*nodes, f.scale) : *nodes;

  // Submission window, for traces with dates.
  std::vector<sched::replay::TraceJob> jobs = trace->jobs;
  if (!f.since.empty() || !f.until.empty()) {
    int64_t from = INT64_MIN, to = INT64_MAX;
    if (!f.since.empty() && !ParseDay(f.since, &from)) return Fail("--since: use YYYY-MM-DD", cli::kExitUsage);
    if (!f.until.empty()) {
      if (!ParseDay(f.until, &to)) return Fail("--until: use YYYY-MM-DD", cli::kExitUsage);
      to += 24 * 3600;  // the whole last day
    }
    std::vector<sched::replay::TraceJob> kept;
    for (auto& j : jobs) {
      if (j.submit_epoch_s == 0) return Fail("--since/--until: this trace has no dates", cli::kExitUsage);
      if (j.submit_epoch_s >= from && j.submit_epoch_s < to) kept.push_back(j);
    }
    int64_t first = INT64_MAX;
    for (auto& j : kept) first = std::min(first, j.submit_s);
    for (auto& j : kept) j.submit_s -= first;
    jobs = std::move(kept);
  }
  if (jobs.empty()) return Fail("the trace has no jobs to replay");

  if (f.partition_by == "auto") {
    bool all_vc = true;
    for (const auto& n : cluster) all_vc = all_vc && n.labels.count("vc");
    opt.partition_label = all_vc ? "vc" : "";
  } else if (f.partition_by != "none") {
    opt.partition_label = f.partition_by;
  }
  // Jobs outside every partition are not part of this cluster's workload.
  std::string outside_note;
  if (!opt.partition_label.empty()) {
    std::set<std::string> parts;
    for (const auto& n : cluster) parts.insert(n.labels.at(opt.partition_label));
    size_t before = jobs.size();
    std::erase_if(jobs, [&](const auto& j) { return !parts.count(j.account); });
    if (before != jobs.size()) {
      outside_note = std::to_string(before - jobs.size()) + " jobs of accounts with no " +
                     opt.partition_label + " partition in the cluster, left out";
    }
  }

  sched::replay::SimResult r = sched::replay::Simulate(jobs, cluster, opt);

  if (!f.per_job.empty()) {
    std::ofstream out(f.per_job);
    out << "id,account,gpus,submit_s,duration_s,start_s,finish_s,jct_s,queue_s,attempts,note\n";
    for (auto& j : r.per_job) {
      bool ran = j.finish_s >= 0;
      out << j.id << "," << j.account << "," << j.gpus << "," << j.submit_s << "," << j.duration_s
          << "," << (ran ? std::to_string(j.start_s) : "") << ","
          << (ran ? std::to_string(j.finish_s) : "") << ","
          << (ran ? std::to_string(j.finish_s - j.submit_s) : "") << ","
          << (ran ? std::to_string(j.start_s - j.submit_s) : "") << "," << j.attempts << ",\""
          << j.note << "\"\n";
    }
    if (!out) return Fail("cannot write " + f.per_job);
  }

  int64_t gpus = 0;
  bool priced = false;
  for (const auto& n : cluster) {
    gpus += static_cast<int64_t>(n.gpus.size());
    priced = priced || n.price > 0;
  }
  double gpu_hours = r.gpu_utilization * static_cast<double>(gpus) * static_cast<double>(r.makespan_s) / 3600;
  std::vector<std::string> notes = trace->notes;
  if (!outside_note.empty()) notes.push_back(outside_note);
  std::string walltime = opt.walltime_factor > 0
                             ? "max_runtime = " + Factor(opt.walltime_factor) +
                                   " x the job's run time (stand-in: the trace has no walltime)"
                             : "none (jobs have no max_runtime; reserved nodes are held outright)";
  if (f.output == "json") {
    nlohmann::json accounts = nlohmann::json::array();
    for (const auto& a : r.per_account) {
      accounts.push_back({{"account", a.account}, {"jobs", a.jobs}, {"avg_jct_s", a.avg_jct_s},
                          {"avg_queue_s", a.avg_queue_s}, {"gpu_hours", a.gpu_hours},
                          {"ftf", a.ftf}});
    }
    nlohmann::json j = {{"policy", f.policy},
                        {"backfill", opt.config.backfill},
                        {"placement", f.placement},
                        {"preemption", opt.config.preemption},
                        {"nodes", cluster.size()},
                        {"gpus", gpus},
                        {"partition_by", opt.partition_label},
                        {"walltime", walltime},
                        {"restart_penalty_s", opt.restart_penalty_s},
                        {"jobs", r.jobs},
                        {"unschedulable", r.unschedulable},
                        {"avg_jct_s", r.avg_jct_s},
                        {"p50_jct_s", r.p50_jct_s},
                        {"p99_jct_s", r.p99_jct_s},
                        {"avg_queue_s", r.avg_queue_s},
                        {"makespan_s", r.makespan_s},
                        {"gpu_utilization", r.gpu_utilization},
                        {"preemptions", r.preemptions},
                        {"scheduler_passes", r.scheduler_passes},
                        {"cost_credits", r.cost_credits},
                        {"fragmentation", r.fragmentation},
                        {"whole_node_jobs", r.whole_node_jobs},
                        {"avg_queue_whole_node_s", r.avg_queue_whole_node_s},
                        {"jain_ftf", r.jain_ftf},
                        {"max_ftf", r.max_ftf},
                        {"accounts", accounts},
                        {"notes", notes}};
    std::cout << j.dump() << "\n";
    return cli::kExitOk;
  }
  printf("policy            %s (backfill %s, preemption %s, placement %s)\n", f.policy.c_str(),
         opt.config.backfill ? "on" : "off", opt.config.preemption ? "on" : "off",
         f.placement.c_str());
  printf("cluster           %zu nodes, %lld GPUs%s\n", cluster.size(), static_cast<long long>(gpus),
         opt.partition_label.empty() ? ""
                                     : (", each account on its own " + opt.partition_label + " partition").c_str());
  printf("walltime          %s\n", walltime.c_str());
  for (const auto& n : notes) printf("note              %s\n", n.c_str());
  printf("jobs completed    %d\n", r.jobs);
  printf("unschedulable     %d  (no node or partition can ever hold them; see --per-job)\n",
         r.unschedulable);
  printf("avg JCT           %s\n", Seconds(r.avg_jct_s).c_str());
  printf("p50 / p99 JCT     %s / %s\n", Seconds(r.p50_jct_s).c_str(), Seconds(r.p99_jct_s).c_str());
  printf("avg queueing      %s\n", Seconds(r.avg_queue_s).c_str());
  printf("makespan          %lld s\n", static_cast<long long>(r.makespan_s));
  printf("GPU utilisation   %.1f%%\n", 100 * r.gpu_utilization);
  printf("preemptions       %lld\n", static_cast<long long>(r.preemptions));
  if (priced) {
    printf("cost              %.2f credits (%.4f per GPU-hour held)\n", r.cost_credits,
           gpu_hours > 0 ? r.cost_credits / gpu_hours : 0.0);
  }
  printf("fragmentation     %.1f%% of idle GPU-time on partly used nodes\n", 100 * r.fragmentation);
  if (r.whole_node_jobs > 0) {
    printf("whole-node jobs   %d, avg queueing %s\n", r.whole_node_jobs,
           Seconds(r.avg_queue_whole_node_s).c_str());
  }
  printf("fairness          Jain %.3f over accounts' finish-time fairness (JCT / run time); worst %.1f\n",
         r.jain_ftf, r.max_ftf);
  if (r.per_account.size() > 1) {
    printf("\n%-16s %8s %12s %12s %12s %8s\n", "ACCOUNT", "JOBS", "AVG JCT", "AVG QUEUE",
           "GPU-HOURS", "FTF");
    for (const auto& a : r.per_account) {
      printf("%-16s %8d %12.0f %12.0f %12.0f %8.1f\n", a.account.c_str(), a.jobs, a.avg_jct_s,
             a.avg_queue_s, a.gpu_hours, a.ftf);
    }
  }
  return cli::kExitOk;
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand("sim", "Replay a cluster trace through the scheduler");
  cmd->add_option("--trace", f->trace, "Trace file")->required();
  cmd->add_option("--format", f->format,
                  "csv (header submit_time,duration,gpus[,account,gpu_type,walltime]), philly, "
                  "tiresias, chronus, alibaba-openb")
      ->check(CLI::IsMember({"csv", "philly", "tiresias", "chronus", "alibaba-openb"}))
      ->capture_default_str();
  cmd->add_option("--cluster", f->cluster,
                  "Nodes: 352x8[:V100][@PRICE][,16x4:A100-80GB@10...] (PRICE: credits per GPU-hour), "
                  "or a Philly VC table or Alibaba node list")
      ->required();
  cmd->add_option("--scale", f->scale, "Keep this fraction of each group of alike nodes (0.5: half)")
      ->capture_default_str();
  cmd->add_option("--policy", f->policy, "fifo, fair, tide or sjf-oracle (knows durations)")
      ->capture_default_str();
  cmd->add_option("--backfill", f->backfill, "auto (off for fifo and sjf-oracle), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--placement", f->placement,
                  "price-first (the server: cheapest free node, best fit among equal prices) or "
                  "pack-first (best fit, then price)")
      ->check(CLI::IsMember({"price-first", "pack-first"}))
      ->capture_default_str();
  cmd->add_option("--preemption", f->preemption, "on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--restart-penalty", f->restart_penalty,
                  "Time a preempted job needs to resume from its checkpoint")
      ->capture_default_str();
  cmd->add_option("--walltime-factor", f->walltime_factor,
                  "Stand-in max_runtime = run time x F for traces without walltime (0: none)")
      ->capture_default_str();
  cmd->add_option("--partition-by", f->partition_by,
                  "Node label that splits the cluster by account (auto: vc if every node has one; none)")
      ->capture_default_str();
  cmd->add_option("--since", f->since, "Only jobs submitted on or after this day (YYYY-MM-DD)");
  cmd->add_option("--until", f->until, "Only jobs submitted on or before this day (YYYY-MM-DD)");
  cmd->add_option("--las-thresholds", f->las_thresholds,
                  "tide: GPU-time per service level, ascending (default 1h,10h)");
  cmd->add_option("--preempt-after", f->preempt_after,
                  "tide: how long a job waits before it may preempt higher service levels")
      ->capture_default_str();
  cmd->add_option("--half-life", f->half_life, "Fair-share usage half-life")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Tie-break seed")->capture_default_str();
  cmd->add_option("-o,--output", f->output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--per-job", f->per_job, "Write per-job results as CSV to this file");
  cli::SetAction(cmd, [f] { return RunSim(*f); });
}

}  // namespace tide::cmd
