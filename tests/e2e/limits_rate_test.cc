// Rate limits over real HTTP: a token that floods gets 429 with
// Retry-After while another token is served, and requests without a valid
// token are limited per address.
#include <gtest/gtest.h>

#include "api/http_client.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

TEST(RateLimitTest, AFloodingTokenIsToldToWaitAndAnotherIsNot) {
  Cluster cluster;
  cluster.StartServer({"--token-rate-limit", "5/s:5", "--address-rate-limit", "2/s:3"});
  std::string alice = cluster.NewUser("alice");
  std::string bob = cluster.NewUser("bob");
  auto http = std::move(api::HttpClient::Create(cluster.url(), *api::Client::TrustFromEnvironment()))
                  .value();
  auto get = [&](const std::string& token) {
    auto r = http->Do("GET", "/v1/jobs", "", {{"Authorization", "Bearer " + token}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : api::HttpResponse{};
  };
  int ok = 0, limited = 0;
  api::HttpResponse refused;
  for (int i = 0; i < 30; ++i) {
    api::HttpResponse r = get(alice);
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++limited;
      refused = r;
    }
  }
  EXPECT_GE(ok, 5);
  EXPECT_GE(limited, 10);
  EXPECT_NE(refused.body.find("rate_limited"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("retry after"), std::string::npos) << refused.body;
  ASSERT_TRUE(refused.headers.count("retry-after"));
  EXPECT_GE(std::stoi(refused.headers["retry-after"]), 1);
  EXPECT_EQ(get(bob).status, 200) << "another token keeps its allowance";

  // Guessing tokens: the first few are 401, then the address waits.
  int unauthorized = 0, slowed = 0;
  for (int i = 0; i < 10; ++i) {
    int status = get("tide_u_" + std::string(64, 'a')).status;
    unauthorized += status == 401;
    slowed += status == 429;
  }
  EXPECT_GE(unauthorized, 3);
  EXPECT_GE(slowed, 5);
  EXPECT_EQ(get(bob).status, 200) << "a valid token is limited by its own allowance only";

  // The CLI reports it plainly.
  CliResult r;
  for (int i = 0; i < 10 && r.err.find("too many requests") == std::string::npos; ++i) {
    r = cluster.Cli({"ls"}, alice);
  }
  EXPECT_NE(r.err.find("too many requests from token ut-"), std::string::npos) << r.err;
}

TEST(RateLimitTest, ABadLimitIsRefusedAtStartNamingTheFlag) {
  Cluster cluster;
  CliResult r = cluster.Cli({"server", "--listen", "127.0.0.1:1", "--data-dir",
                             cluster.dir() + "/bad", "--token-rate-limit", "lots"},
                            "");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("--token-rate-limit: \"lots\""), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace tide::e2e
