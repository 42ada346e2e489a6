// `tide sbatch` as a Slurm user's first day goes, through the real server,
// agents and CLI: the directory sbatch runs in travels with the script
// ($SLURM_SUBMIT_DIR, where the script starts), --code and --no-code
// choose another or none, what is not a batch script is refused naming it,
// and srun in the script starts its tasks, on every node of a gang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

namespace fs = std::filesystem;

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a", "2xRTX4090:24GB");
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
    // A project as a Slurm user keeps one.
    proj_ = cluster_.dir() + "/proj";
    Write("train.py",
          "import os\n"
          "print('trained on', open('data/input.txt').read().strip(),\n"
          "      'in the submit dir:', os.getcwd() == os.environ['SLURM_SUBMIT_DIR'])\n");
    Write("data/input.txt", "mnist\n");
    Write(".gitignore", "*.ckpt\n");
    Write("old.ckpt", "left out");
    Write(".git/HEAD", "ref: refs/heads/main\n");
    Write("run.sh",
          "#!/bin/bash\n#SBATCH --job-name=first-day\n#SBATCH --gres=gpu:1\n"
          "set -e\npython3 train.py\ntest ! -e old.ckpt && test ! -e .git\n"
          "echo \"submit=$SLURM_SUBMIT_DIR pwd=$PWD\"\n");
  }
  void Write(const std::string& rel, const std::string& text, const std::string& root = "") {
    const std::string path = (root.empty() ? proj_ : root) + "/" + rel;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }
  // Submits and returns the job id, or "" (failing the test).
  std::string Sbatch(const std::vector<std::string>& args, const std::string& cwd) {
    std::vector<std::string> argv = {"sbatch", "--parsable"};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult r = cluster_.Cli(argv, token_, cwd);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return "";
    return r.out.substr(0, r.out.find('\n'));
  }
  std::string Logs(const std::string& id, int rank = 0) {
    auto logs = client_->GetLogs(id, 0, 0, rank);
    return logs.ok() ? *logs : logs.status().ToString();
  }
  // Runs the script `text` from the project and returns its finished job.
  api::Job RunScript(const std::string& text, const std::string& name = "step.sh") {
    Write(name, text);
    std::string id = Sbatch({name}, proj_);
    if (id.empty()) return {};
    return WaitTerminal(*client_, id);
  }

  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
  std::string proj_;
};

TEST_F(SlurmTest, TheSubmitDirectoryTravelsWithTheScript) {
  std::string id = Sbatch({"run.sh"}, proj_);
  ASSERT_FALSE(id.empty());
  api::Job done = WaitTerminal(*client_, id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(id);
  const std::string log = Logs(id);
  EXPECT_NE(log.find("trained on mnist in the submit dir: True"), std::string::npos) << log;
  size_t at = log.find("submit=");
  ASSERT_NE(at, std::string::npos) << log;
  std::string line = log.substr(at, log.find('\n', at) - at);
  std::string submit = line.substr(7, line.find(' ') - 7);
  EXPECT_EQ(line, "submit=" + submit + " pwd=" + submit);
  EXPECT_NE(submit, proj_) << "the job's own copy";
}

TEST_F(SlurmTest, CodeChoosesTheDirectoryAndNoCodeSendsOnlyTheScript) {
  // --code DIR from anywhere; options and --code in any order before the script.
  const std::string elsewhere = cluster_.dir() + "/elsewhere";
  fs::create_directories(elsewhere);
  std::string id =
      Sbatch({"-J", "chosen", "--code", proj_, "--time=5", proj_ + "/run.sh"}, elsewhere);
  ASSERT_FALSE(id.empty());
  api::Job done = WaitTerminal(*client_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(id);
  EXPECT_EQ(done.spec.name, "chosen");

  // `--code .` is the directory, not the script.
  id = Sbatch({"--code", ".", "run.sh"}, proj_);
  ASSERT_FALSE(id.empty());
  done = WaitTerminal(*client_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(id);

  // --no-code: the script alone, still started in $SLURM_SUBMIT_DIR.
  Write(
      "alone.sh",
      "#!/bin/bash\ntest ! -e train.py || exit 7\ntest \"$PWD\" = \"$SLURM_SUBMIT_DIR\" || exit 8\n"
      "echo alone\n");
  id = Sbatch({"--no-code", "alone.sh"}, proj_);
  ASSERT_FALSE(id.empty());
  done = WaitTerminal(*client_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(id);
  EXPECT_NE(Logs(id).find("alone"), std::string::npos);
}

TEST_F(SlurmTest, ATooLargeDirectoryIsRefusedSayingHowToChoose) {
  // Sparse: its size without writing it.
  std::ofstream(proj_ + "/data/big.bin").close();
  ASSERT_EQ(::truncate((proj_ + "/data/big.bin").c_str(), 150LL << 20), 0);
  CliResult r = cluster_.Cli({"sbatch", "run.sh"}, token_, proj_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("150.0 MiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("limit of 100.0 MiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("data/"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--code DIR"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--no-code"), std::string::npos) << r.err;
  auto list = client_->Call("GET", "/v1/jobs");
  EXPECT_TRUE((*list)["jobs"].empty()) << "nothing was submitted";
  // Leaving it out in .gitignore is enough.
  Write(".gitignore", "*.ckpt\n/data/big.bin\n");
  EXPECT_FALSE(Sbatch({"run.sh"}, proj_).empty());
}

TEST_F(SlurmTest, WhatIsNotABatchScriptIsRefusedNamingIt) {
  CliResult dir = cluster_.Cli({"sbatch", "data"}, token_, proj_);
  EXPECT_NE(dir.exit_code, 0);
  EXPECT_NE(dir.err.find("data is a directory, not a batch script"), std::string::npos) << dir.err;
  CliResult code = cluster_.Cli({"sbatch", "--code", "."}, token_, proj_);
  EXPECT_NE(code.exit_code, 0);
  EXPECT_NE(code.err.find("no batch script"), std::string::npos) << code.err;
  CliResult text = cluster_.Cli({"sbatch", "train.py"}, token_, proj_);
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.err.find("train.py:1: this does not look like a batch script"), std::string::npos)
      << text.err;
  auto list = client_->Call("GET", "/v1/jobs");
  EXPECT_TRUE((*list)["jobs"].empty());
}

TEST_F(SlurmTest, SrunRunsOneCommandPerTaskAndFailsWithThem) {
  api::Job done = RunScript(
      "#!/bin/bash\n#SBATCH --gres=gpu:2\nset -e\n"
      "srun -n 2 sh -c 'echo procid=$SLURM_PROCID localid=$SLURM_LOCALID ntasks=$SLURM_NTASKS'\n"
      "srun -l -n 2 --gpus-per-task=1 sh -c 'echo gpu=$CUDA_VISIBLE_DEVICES'\n"
      "srun python3 train.py\n");
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(done.id);
  const std::string log = Logs(done.id);
  EXPECT_NE(log.find("procid=0 localid=0 ntasks=2"), std::string::npos) << log;
  EXPECT_NE(log.find("procid=1 localid=1 ntasks=2"), std::string::npos) << log;
  EXPECT_NE(log.find("0: gpu=0"), std::string::npos) << log;
  EXPECT_NE(log.find("1: gpu=1"), std::string::npos) << log;
  EXPECT_NE(log.find("trained on mnist"), std::string::npos) << log;

  // sbatch --ntasks is what a bare srun starts.
  done = RunScript(
      "#!/bin/bash\n#SBATCH --ntasks=3\nsrun sh -c 'echo task $SLURM_PROCID of $SLURM_NTASKS'\n");
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(done.id);
  EXPECT_NE(Logs(done.id).find("task 2 of 3"), std::string::npos) << Logs(done.id);

  // A failing task fails srun, and with it the script.
  done = RunScript("#!/bin/bash\nsrun -n 2 sh -c 'exit $((SLURM_PROCID * 5))'\n");
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_EQ(done.exit_code, 5) << done.reason;
  EXPECT_NE(Logs(done.id).find("task 1: exited with exit code 5"), std::string::npos)
      << Logs(done.id);

  // What it cannot honour is refused naming the option.
  done = RunScript("#!/bin/bash\nsrun --multi-prog tasks.conf\n");
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_NE(Logs(done.id).find("srun: error: --multi-prog is not supported by tide's srun"),
            std::string::npos)
      << Logs(done.id);
}

TEST_F(SlurmTest, SrunInAGangCoversEveryRank) {
  cluster_.StartAgent("b", "2xRTX4090:24GB");
  api::Job done = RunScript(
      "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks=4\n#SBATCH --gres=gpu:2\n"
      "srun sh -c 'echo task=$SLURM_PROCID node=$SLURM_NODEID local=$SLURM_LOCALID "
      "of=$SLURM_NTASKS'\n"
      "srun -N 1 sh -c 'echo only on node $SLURM_NODEID'\n");
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << "\n" << Logs(done.id);
  const std::string rank0 = Logs(done.id, 0), rank1 = Logs(done.id, 1);
  for (const char* line :
       {"task=0 node=0 local=0 of=4", "task=1 node=0 local=1 of=4", "only on node 0"}) {
    EXPECT_NE(rank0.find(line), std::string::npos) << line << "\n" << rank0;
  }
  for (const char* line : {"task=2 node=1 local=0 of=4", "task=3 node=1 local=1 of=4"}) {
    EXPECT_NE(rank1.find(line), std::string::npos) << line << "\n" << rank1;
  }
  EXPECT_EQ(rank1.find("only on node"), std::string::npos) << rank1;
  EXPECT_EQ(rank0.find("task=2"), std::string::npos) << rank0;
}

}  // namespace
}  // namespace tide::e2e
