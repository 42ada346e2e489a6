// Writes the store fixture that server/record_codec_test.cc recovers: a
// real server, two agents and the command line leave a data dir holding
// every kind of row (users, tokens, cards, prices, caps, weights, nodes,
// batches, the ledger) and jobs in every status, with retries, a gang, a
// checkpoint, a dependency and an idempotency key, and jobs still running
// when the server is stopped.
//
// Not part of `make test`: run it by hand when a new store version must be
// kept readable, then commit the files it writes:
//   TIDE_FIXTURE_OUT=server/testdata/store-v3 build/tests/e2e_test
//     --gtest_also_run_disabled_tests --gtest_filter='StoreFixture.DISABLED_Write'
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

std::string Trimmed(std::string s) {
  s.erase(s.find_last_not_of("\n") + 1);
  return s;
}

TEST(StoreFixture, DISABLED_Write) {
  const char* out = std::getenv("TIDE_FIXTURE_OUT");
  ASSERT_NE(out, nullptr) << "set TIDE_FIXTURE_OUT to the directory to write";
  Cluster cluster("30s");
  cluster.StartServer();
  const std::string admin = Trimmed(ReadAll(cluster.dir() + "/server/admin.token"));
  auto cli = [&](const std::vector<std::string>& args, const std::string& token) {
    CliResult r = cluster.Cli(args, token);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  cli({"admin", "prices", "set", "RTX4090=0.4", "A100=10", "--fee", "0.1", "--spot-discount", "0.6"},
      admin);
  cluster.NewUser("bob");
  std::string join = cli({"admin", "join-token", "--provider", "bob"}, admin).out;
  join = join.substr(0, join.find('\n'));
  cluster.StartAgent("rig-a", "2xRTX4090:24GB", {"--join-token", join, "--checkpoint-interval", "1s"});
  cluster.StartAgent("rig-b", "2xRTX4090:24GB", {"--join-token", join, "--checkpoint-interval", "1s"});
  const std::string alice_token = cluster.NewUser("alice");
  auto alice = cluster.ClientFor(alice_token);
  json codes = json::parse(
      cli({"admin", "cards", "mint", "--count", "2", "--value", "100", "-o", "json"}, admin).out);
  cli({"redeem", codes.at(0).get<std::string>()}, alice_token);
  cli({"admin", "user", "cap", "alice", "--daily", "500"}, admin);
  cli({"admin", "user", "weight", "alice", "2"}, admin);

  std::string done = SubmitOk(*alice, {{"name", "done"}, {"command", "echo hello"}, {"max_runtime", "1m"}});
  std::string failed = SubmitOk(
      *alice, {{"name", "failed"}, {"command", "exit 3"}, {"max_runtime", "1m"}, {"retry_times", 1}});
  EXPECT_EQ(WaitTerminal(*alice, done).status, api::JobStatus::kCompleted);
  EXPECT_EQ(WaitTerminal(*alice, failed).status, api::JobStatus::kFailed);
  std::string after =
      SubmitOk(*alice, {{"name", "after"}, {"command", "true"}, {"max_runtime", "1m"},
                        {"depends_on", json::array({{{"condition", "afterok"}, {"job", done}}})}});
  EXPECT_EQ(WaitTerminal(*alice, after).status, api::JobStatus::kCompleted);
  std::string cancelled = SubmitOk(*alice, {{"name", "cancelled"},
                                            {"command", "true"},
                                            {"resources", {{"gpu_type", "A100"}}},
                                            {"max_runtime", "1m"}});
  cli({"cancel", cancelled}, alice_token);
  // Waits for ever: no node has an A100.
  SubmitOk(*alice, {{"name", "waiting"},
                    {"command", "true"},
                    {"resources", {{"gpu_type", "A100"}}},
                    {"max_runtime", "1h"},
                    {"tags", json::array({"fixture"})}});
  auto keyed = alice->CallWithHeaders(
      "POST", "/v1/jobs", json{{"name", "keyed"}, {"command", "true"}, {"max_runtime", "1m"}},
      {{"Idempotency-Key", "fixture-key-1"}});
  ASSERT_TRUE(keyed.ok()) << keyed.status().ToString();
  WaitTerminal(*alice, (*keyed)["id"].get<std::string>());

  // A batch of three trials, run to the end.
  const std::string batch_file = cluster.dir() + "/sweep.yaml";
  {
    std::FILE* f = std::fopen(batch_file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(
        "experiment_batch: sweep\nmax_concurrent: 2\nbudget: 5\n"
        "template:\n  command: echo lr={lr}\n  max_runtime: 1m\n"
        "grid:\n  lr: [0.1, 0.01, 0.001]\n",
        f);
    std::fclose(f);
  }
  json batch = json::parse(cli({"batch", "submit", batch_file, "-o", "json"}, alice_token).out);
  const std::string batch_id = batch["id"].get<std::string>();
  ASSERT_TRUE(Eventually([&] {
    auto b = alice->Call("GET", "/v1/batches/" + batch_id);
    return b.ok() && (*b)["status"] == "completed";
  }, std::chrono::seconds(60)));

  // Still running when the server stops: a checkpointing job, a spot job
  // and a two-node gang.
  std::string ckpt = SubmitOk(
      *alice, {{"name", "checkpointing"},
               {"command", "echo state > \"$TIDE_CHECKPOINT_DIR/state\"; sleep 600"},
               {"max_runtime", "1h"}});
  ASSERT_TRUE(Eventually([&] { return alice->GetJob(ckpt)->checkpoint_attempt == 1; }));
  SubmitOk(*alice, {{"name", "spot"}, {"command", "sleep 600"}, {"tier", "spot"}, {"max_runtime", "1h"}});
  std::string gang = SubmitOk(*alice, {{"name", "gang"},
                                       {"command", "sleep 600"},
                                       {"resources", {{"nodes", 2}, {"gpus_per_node", 1}}},
                                       {"max_runtime", "1h"}});
  ASSERT_TRUE(Eventually([&] { return alice->GetJob(gang)->status == api::JobStatus::kRunning; }));

  cluster.KillServer(SIGTERM);
  namespace fs = std::filesystem;
  fs::create_directories(out);
  for (const char* name : {"tide.db", "tide.db-wal"}) {
    fs::path from = fs::path(cluster.dir()) / "server" / name;
    if (fs::exists(from)) fs::copy_file(from, fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace
}  // namespace tide::e2e
