// srun for the jobs of `tide sbatch` (srun.h, srun.sh): the script the
// agent ships, run by bash as a job would, on one node or as any node of
// a gang.
#include "agent/srun.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int rc = -1;
  std::string out, err;
  // stdout's lines, sorted (tasks print in any order).
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::sort(lines.begin(), lines.end());
    return lines;
  }
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class SrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-srun-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/srun", SrunScript(), 0755).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // srun ARGS on node `rank` of `nnodes`, with the job's GPUs "0,1".
  Ran Run(const std::vector<std::string>& args, int rank = 0, int nnodes = 1,
          std::map<std::string, std::string> env = {}) {
    env.emplace("PATH", "/usr/bin:/bin");
    env.emplace("TIDE_NODE_RANK", std::to_string(rank));
    env.emplace("TIDE_NNODES", std::to_string(nnodes));
    env.emplace("CUDA_VISIBLE_DEVICES", "0,1");
    std::string cmd = "env -i";
    for (const auto& [k, v] : env) {
      if (!v.empty()) cmd += " " + Quote(k + "=" + v);
    }
    cmd += " " + Quote(dir_ + "/srun");
    for (const auto& a : args) cmd += " " + Quote(a);
    cmd += " >" + dir_ + "/out 2>" + dir_ + "/err";
    Ran r;
    int status = std::system(cmd.c_str());
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = *ReadFile(dir_ + "/out");
    r.err = *ReadFile(dir_ + "/err");
    return r;
  }
  static std::vector<std::string> Sh(const std::string& script) { return {"sh", "-c", script}; }
  static std::vector<std::string> With(std::vector<std::string> options,
                                       const std::vector<std::string>& command) {
    options.insert(options.end(), command.begin(), command.end());
    return options;
  }

  std::string dir_;
};

using Lines = std::vector<std::string>;
const char* kIds = "echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_NTASKS";

TEST_F(SrunTest, TheBuiltInScriptIsTheSource) {
  auto source = ReadFile(TIDE_SRUN_SOURCE);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(SrunScript(), *source);
}

TEST_F(SrunTest, RunsTheCommandOncePerTaskWithItsIds) {
  Ran r = Run(With({"-n", "2"}, Sh(kIds)));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.Lines(), (Lines{"0 0 0 2", "1 1 0 2"}));
  EXPECT_EQ(Run(With({"--ntasks=3"}, Sh("echo $SLURM_PROCID"))).Lines(), (Lines{"0", "1", "2"}));
  EXPECT_EQ(Run(With({"-n3"}, Sh("echo $SLURM_PROCID"))).Lines(), (Lines{"0", "1", "2"}));
  // Without -n: the job's tasks (tide sbatch --ntasks), else one per node.
  EXPECT_EQ(Run(Sh("echo $SLURM_PROCID")).Lines(), (Lines{"0"}));
  EXPECT_EQ(Run(Sh("echo $SLURM_PROCID"), 0, 1, {{"SLURM_NTASKS", "2"}}).Lines(),
            (Lines{"0", "1"}));
  // Arguments after the command are the command's.
  EXPECT_EQ(Run({"-n", "1", "echo", "-n", "2", "--label"}).out, "2 --label");
}

TEST_F(SrunTest, AGangSplitsTheTasksInBlocksOverItsNodes) {
  // -n 3 over 2 nodes: tasks 0 and 1 on node 0, task 2 on node 1.
  EXPECT_EQ(Run(With({"-n", "3"}, Sh(kIds)), 0, 2).Lines(), (Lines{"0 0 0 3", "1 1 0 3"}));
  EXPECT_EQ(Run(With({"-n", "3"}, Sh(kIds)), 1, 2).Lines(), (Lines{"2 0 1 3"}));
  // By default one task per node.
  EXPECT_EQ(Run(Sh(kIds), 1, 2).Lines(), (Lines{"1 0 1 2"}));
  // --ntasks-per-node fills each node in turn.
  EXPECT_EQ(Run(With({"--ntasks-per-node=2"}, Sh(kIds)), 1, 2).Lines(),
            (Lines{"2 0 1 4", "3 1 1 4"}));
  EXPECT_EQ(Run(With({"-n", "2", "--ntasks-per-node", "2"}, Sh(kIds)), 1, 2).Lines(), Lines{});
  // -N 1: only the first node runs the step; the others return at once.
  Ran other = Run(With({"-N", "1"}, Sh("echo ran")), 1, 2);
  EXPECT_EQ(other.rc, 0);
  EXPECT_EQ(other.out, "");
  EXPECT_EQ(Run(With({"-N1"}, Sh("echo $SLURM_NNODES $SLURM_STEP_NUM_NODES")), 0, 2).out, "1 1\n");
}

TEST_F(SrunTest, ExitsWithTheHighestExitCodeAfterAllTasks) {
  Ran r = Run(With({"-n", "3"}, Sh("sleep 0.$SLURM_PROCID; echo done; exit $SLURM_PROCID")));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.Lines(), (Lines{"done", "done", "done"})) << "every task ran to its end";
  EXPECT_NE(r.err.find("task 1: exited with exit code 1"), std::string::npos) << r.err;
  // --kill-on-bad-exit ends the others.
  Ran k = Run(With({"-K", "-n", "2"}, Sh("[ $SLURM_PROCID = 1 ] && exit 4; sleep 20; echo late")));
  EXPECT_EQ(k.rc, 4);
  EXPECT_EQ(k.out, "");
  EXPECT_NE(k.err.find("--kill-on-bad-exit"), std::string::npos) << k.err;
  EXPECT_EQ(Run({"no-such-command-here"}).rc, 127);
}

TEST_F(SrunTest, LabelsGpusCpusExportAndChdir) {
  EXPECT_EQ(Run(With({"-l", "-n", "2"}, Sh("echo hi"))).Lines(), (Lines{"0: hi", "1: hi"}));
  EXPECT_EQ(Run(With({"-lu", "-n", "2"}, Sh("echo hi"))).Lines(), (Lines{"0: hi", "1: hi"}));
  EXPECT_EQ(
      Run(With({"-n", "2", "--gpus-per-task=1"}, Sh("echo $SLURM_PROCID=$CUDA_VISIBLE_DEVICES")))
          .Lines(),
      (Lines{"0=0", "1=1"}));
  EXPECT_EQ(Run(With({"--gpus-per-node=1"}, Sh("echo $CUDA_VISIBLE_DEVICES"))).out, "0\n");
  EXPECT_EQ(Run(With({"--gres=gpu:RTX4090:2"}, Sh("echo $CUDA_VISIBLE_DEVICES"))).out, "0,1\n");
  EXPECT_EQ(Run(With({"-c", "4"}, Sh("echo $SLURM_CPUS_PER_TASK"))).out, "4\n");
  EXPECT_EQ(Run(With({"--export=ALL,LR=0.1"}, Sh("echo $LR"))).out, "0.1\n");
  EXPECT_EQ(Run(With({"-D", "/"}, Sh("pwd"))).out, "/\n");
  Ran harmless = Run(With({"-u", "-J", "step", "--mpi=none", "--cpu-bind=cores", "-t", "5",
                           "--exclusive", "--distribution=block"},
                          Sh("echo ok")));
  EXPECT_EQ(harmless.rc, 0) << harmless.err;
  EXPECT_EQ(harmless.out, "ok\n");
}

TEST_F(SrunTest, WhatItCannotHonourIsRefusedNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--multi-prog", "x.conf", "true"}, "--multi-prog"},
      {{"--frobnicate", "true"}, "--frobnicate"},
      {{"--export=NONE", "true"}, "--export=NONE"},
      {{"-w", "node7", "true"}, "--nodelist"},
      {{"-o", "out.txt", "true"}, "--output"},
      {{"--pty", "bash"}, "--pty"},
      {{"--mpi=pmix", "true"}, "--mpi=pmix"},
      {{"--distribution=cyclic", "true"}, "--distribution=cyclic"},
      {{"-N", "3", "true"}, "--nodes=3: the job has 2 node(s)"},
      {{"-N", "1-2", "true"}, "--nodes=1-2"},
      {{"-n", "0", "true"}, "--ntasks"},
      {{"--gpus-per-node=4", "true"}, "4 GPUs per node; the job has 2"},
      {{"-n", "3", "-N", "1", "--gpus-per-task=1", "true"}, "--gpus-per-task=1"},
      {{"--gres=mps:10", "true"}, "--gres=mps:10"},
      {{"-n", "2"}, "no command given"},
  };
  for (const auto& [args, part] : cases) {
    Ran r = Run(args, 0, 2);
    EXPECT_EQ(r.rc, 1) << part;
    EXPECT_NE(r.err.find("srun: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << part << ": " << r.err;
    EXPECT_EQ(r.out, "") << part;
  }
  Ran outside = Run({"true"}, 0, 1, {{"TIDE_NODE_RANK", ""}});
  EXPECT_EQ(outside.rc, 1);
  EXPECT_NE(outside.err.find("inside a job of tide sbatch"), std::string::npos) << outside.err;
  EXPECT_EQ(Run({"--help"}).rc, 0);
}

}  // namespace
}  // namespace tide::agent
