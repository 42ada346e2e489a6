// Cluster traces and cluster shapes for replay: loaders for the trace
// formats in shared/traces (and a plain CSV for a user's own history), and
// cluster descriptions ("352x8:V100", a Philly VC table, an Alibaba node
// list). Loaders read from a stream the caller opened; every error names
// the file and line.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/snapshot.h"

namespace tide::sched::replay {

struct TraceJob {
  std::string id;
  int64_t submit_s = 0;    // seconds from the start of the trace
  int64_t duration_s = 0;  // run time once started
  int gpus = 1;            // in all (a gang when more than one node holds)
  std::string account;     // "" if the trace has none
  std::vector<std::string> gpu_types;  // canonical models; empty = any
  double cpus = 0;         // 0 = not in the trace
  int64_t memory_mb = 0;
  int64_t walltime_s = 0;  // requested limit; 0 = not in the trace
  bool fractional = false;  // asked for part of one GPU (run on a whole one)
  int64_t submit_epoch_s = 0;  // absolute submit time, where the trace has dates
};

struct Trace {
  std::vector<TraceJob> jobs;
  // Rows read but not replayed, and why ("205 rows with num_gpu 0: not GPU jobs").
  std::vector<std::string> notes;
};

// Trace formats: "csv" (header with submit_time,duration,gpus and optional
// account,gpu_type,walltime), "philly" (philly-pollux), "tiresias",
// "chronus" (philly-chronus), "alibaba-openb" (openb pod lists).
Result<Trace> LoadTrace(std::istream& in, const std::string& name, const std::string& format);
bool KnownTraceFormat(const std::string& format);

// Canonical GPU model for traces: "A100-SXM4-80GB" -> "A100", "v100m16" -> "V100M16".
std::string CanonicalModel(const std::string& model);

// "352x8" or "352x8:V100@2.5,16x4:A100-80GB@10": NODESxGPUS[:MODEL[-NNGB]][@PRICE]
// parts. Nodes are n00001, ...; GPU memory from a -NNGB suffix, else 32
// GiB; PRICE in credits per GPU-hour (none: free).
Result<std::vector<NodeView>> ParseCluster(const std::string& spec);

// A cluster file: a Philly VC table (header "vc,node num": 8 GPUs and 96
// CPUs a node, each node labelled vc=<id>) or an Alibaba openb node list
// (header "sn,cpu_milli,memory_mib,gpu,model"; nodes without GPUs are left
// out).
Result<std::vector<NodeView>> LoadCluster(std::istream& in, const std::string& name);

// Keeps round(fraction x count) nodes, at least one, of each group of alike
// nodes (same vc label and GPU model): "the cluster with half its nodes".
std::vector<NodeView> ScaleCluster(const std::vector<NodeView>& nodes, double fraction);

}  // namespace tide::sched::replay
