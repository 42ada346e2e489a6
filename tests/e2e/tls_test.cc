// TLS between real processes: join tokens carry the server's pins, agents
// refuse a server whose key is not pinned, and a rotation to the announced
// next key keeps agents working without a restart (docs/security.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "common/tls.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

std::vector<std::string> SavedPins(const std::string& path) {
  std::vector<std::string> pins;
  std::string text = ReadAll(path), line;
  for (char c : text) {
    if (c != '\n') {
      line += c;
    } else if (!line.empty()) {
      pins.push_back(line);
      line.clear();
    }
  }
  return pins;
}

class TlsE2eTest : public ::testing::Test {
 protected:
  TlsE2eTest() : cluster_("3s", /*tls=*/true) {}
  void SetUp() override { cluster_.StartServer(); }
  std::string tls_dir() const { return cluster_.dir() + "/server/tls"; }
  Cluster cluster_;
};

TEST_F(TlsE2eTest, AJoinTokenCarriesThePinsOfTheCertificateAndTheNextKey) {
  auto join = cluster_.admin().CreateJoinToken();
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  auto parts = tls::SplitJoinToken(join->token, "token");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  auto next = tls::PinOfKey(ReadAll(tls_dir() + "/next-key.pem"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(parts->pins, (std::vector<std::string>{cluster_.pin(), *next}));
  EXPECT_EQ(join->pins, parts->pins);
  // The printed command line says what the token carries.
  CliResult r = cluster_.Cli({"admin", "join-token"}, cluster_.admin_token());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("certificate pins " + cluster_.pin() + " " + *next), std::string::npos)
      << r.err;
}

TEST_F(TlsE2eTest, AnAgentRefusesAServerWhoseKeyItDoesNotPin) {
  auto join = cluster_.admin().CreateJoinToken();
  ASSERT_TRUE(join.ok());
  auto parts = tls::SplitJoinToken(join->token, "token");
  ASSERT_TRUE(parts.ok());
  std::string other(64, '0');
  try {
    cluster_.StartAgent("a1", "1xRTX4090:24GB", {"--join-token", parts->secret + "." + other});
    ADD_FAILURE() << "the agent registered with a server its pin does not name";
  } catch (const std::runtime_error& e) {
    std::string log = ReadAll(cluster_.dir() + "/agent-a1.log");
    EXPECT_NE(log.find("sha256:" + other), std::string::npos) << log;
    EXPECT_NE(log.find(cluster_.pin()), std::string::npos) << log;
  }
  EXPECT_FALSE(cluster_.agent("a1").Running());
  auto nodes = cluster_.admin().ListNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE(nodes->empty());
}

TEST_F(TlsE2eTest, AgentsFollowARotationToTheNextKeyWithoutARestart) {
  cluster_.StartAgent("a1", "1xRTX4090:24GB");
  std::string old_pin = cluster_.pin();
  auto next = tls::PinOfKey(ReadAll(tls_dir() + "/next-key.pem"));
  ASSERT_TRUE(next.ok());
  std::string agent_pins = cluster_.dir() + "/agent-a1/server.pins";
  EXPECT_EQ(SavedPins(agent_pins), (std::vector<std::string>{old_pin, *next}));

  // The operator rotates to the next key: the server notices the file and
  // makes a certificate for it, and a fresh next key that it announces.
  std::filesystem::rename(tls_dir() + "/next-key.pem", tls_dir() + "/key.pem");
  ASSERT_TRUE(Eventually([&] { return cluster_.pin() == *next; }, std::chrono::seconds(30)));
  std::string newest;
  ASSERT_TRUE(Eventually(
      [&] {
        auto pin = tls::PinOfKey(ReadAll(tls_dir() + "/next-key.pem"));
        if (pin.ok()) newest = *pin;
        return pin.ok() && *pin != *next;
      },
      std::chrono::seconds(30)));
  // The agent hears of it in a heartbeat answer and keeps both pins.
  EXPECT_TRUE(Eventually(
      [&] { return SavedPins(agent_pins) == std::vector<std::string>{*next, newest}; },
      std::chrono::seconds(30)))
      << ReadAll(agent_pins);

  // Every connection is made again against the new certificate: the
  // agent, which was never restarted, still takes work.
  cluster_.KillServer(SIGTERM);
  cluster_.StartServer();
  EXPECT_EQ(cluster_.pin(), *next);
  auto alice = cluster_.ClientFor(cluster_.NewUser("alice"));
  std::string id = SubmitOk(*alice, {{"command", {"true"}}, {"resources", {{"gpu_type", "RTX4090"}}}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitTerminal(*alice, id).status, api::JobStatus::kCompleted);

  // A client that pins only the old key is refused, never let through.
  auto stale = api::Client::Create(cluster_.url(), "", api::TlsTrust{"", {old_pin}});
  ASSERT_TRUE(stale.ok());
  Status st = (*stale)->Health();
  EXPECT_EQ(st.code(), Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find(*next), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tide::e2e
