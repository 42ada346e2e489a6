// Rate limits over real HTTP: a token that floods gets 429 with
// Retry-After while another token is served, requests without a valid
// token are limited per address, and a token's requests open at once are
// capped.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "api/http_client.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

// Logging in again gives no fresh allowance: a console session's requests
// count against the token it was made from.
TEST(RateLimitTest, SessionsShareTheAllowanceOfTheirToken) {
  Cluster cluster;
  cluster.StartServer({"--token-rate-limit", "5/s:5"});
  std::string alice = cluster.NewUser("alice");
  auto connect = [&] {
    return std::move(api::HttpClient::Create(cluster.url(), *api::Client::TrustFromEnvironment()))
        .value();
  };
  const std::string name = cluster.tls() ? "__Host-tide_session" : "tide_session";
  std::vector<std::string> cookies;
  for (int i = 0; i < 3; ++i) {
    auto r = connect()->Do("POST", "/v1/session", "{\"token\":\"" + alice + "\"}",
                           {{"Content-Type", "application/json"}});
    ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
    std::string set = r->headers["set-cookie"];
    ASSERT_EQ(set.rfind(name + "=", 0), 0u) << set;
    cookies.push_back(set.substr(0, set.find(';')));
  }
  // 5 at once and 5 a second more, whichever session asks: with an
  // allowance each, the three would be served at least 15 times.
  auto start = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < 45; ++i) {
    auto r = connect()->Do("GET", "/v1/jobs", "", {{"Cookie", cookies[i % 3]}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->status == 200 || r->status == 429) << r->status << " " << r->body;
    ok += r->status == 200;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LE(ok, 5 + static_cast<int>(5 * seconds) + 1) << "in " << seconds << " s";
  EXPECT_GE(ok, 5);
}

TEST(RateLimitTest, AFloodingTokenIsToldToWaitAndAnotherIsNot) {
  Cluster cluster;
  cluster.StartServer({"--token-rate-limit", "5/s:5", "--address-rate-limit", "2/s:3"});
  std::string alice = cluster.NewUser("alice");
  std::string bob = cluster.NewUser("bob");
  // A connection each: one that got a 429 is not read again for a second
  // (below), and these requests come faster than that.
  auto get = [&](const std::string& token) {
    auto http = std::move(api::HttpClient::Create(cluster.url(), *api::Client::TrustFromEnvironment()))
                    .value();
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

  // On one connection, a request after a 429 is read only once Retry-After
  // has passed: a flood's connections cost the server no CPU.
  auto http = std::move(api::HttpClient::Create(cluster.url(), *api::Client::TrustFromEnvironment()))
                  .value();
  auto on_one = [&] {
    auto res = http->Do("GET", "/v1/jobs", "", {{"Authorization", "Bearer " + alice}});
    return res.ok() ? res->status : 0;
  };
  int status = 0;
  for (int i = 0; i < 20 && status != 429; ++i) status = on_one();
  ASSERT_EQ(status, 429);
  auto before = std::chrono::steady_clock::now();
  on_one();
  EXPECT_GE(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(900));
}

TEST(RateLimitTest, ATokenHasAtMostItsLimitOfRequestsOpenAtOnce) {
  Cluster cluster;
  cluster.StartServer({"--token-inflight-limit", "2"});
  std::string alice = cluster.NewUser("alice");
  std::string bob = cluster.NewUser("bob");
  auto client = cluster.ClientFor(alice);
  std::string id = SubmitOk(*client, {{"command", {"true"}}});  // no agent: it waits
  auto connect = [&] {
    return std::move(api::HttpClient::Create(cluster.url(), *api::Client::TrustFromEnvironment()))
        .value();
  };
  auto get = [&](const std::string& token, const std::string& path) {
    auto r = connect()->Do("GET", path, "", {{"Authorization", "Bearer " + token}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : api::HttpResponse{};
  };
  // A second token of alice's, to end the job while the first is full.
  auto spare = connect()->Do("POST", "/v1/tokens", R"({"name": "spare"})",
                             {{"Authorization", "Bearer " + alice}});
  ASSERT_TRUE(spare.ok() && spare->status == 201) << (spare.ok() ? spare->body : "");
  auto closer = cluster.ClientFor(nlohmann::json::parse(spare->body).value("token", ""));
  // Two log follows hold alice's two slots for as long as they stream.
  std::vector<std::thread> follows;
  for (int i = 0; i < 2; ++i) {
    follows.emplace_back([&] { get(alice, "/v1/jobs/" + id + "/logs?follow=true"); });
  }
  api::HttpResponse third;
  EXPECT_TRUE(Eventually([&] {
    third = get(alice, "/v1/jobs");
    return third.status == 429;
  })) << third.status << " " << third.body;
  EXPECT_NE(third.body.find("2 requests open at once"), std::string::npos) << third.body;
  EXPECT_EQ(third.headers["retry-after"], "1");
  EXPECT_EQ(get(bob, "/v1/jobs").status, 200) << "another token is not held up";
  // The job ends, the streams end, the slots come back.
  auto cancelled = closer->CancelJob(id);
  EXPECT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  for (auto& t : follows) t.join();
  EXPECT_TRUE(Eventually([&] { return get(alice, "/v1/jobs").status == 200; }));

  CliResult bad = cluster.Cli({"server", "--listen", "127.0.0.1:1", "--data-dir",
                               cluster.dir() + "/bad", "--token-inflight-limit", "0"},
                              "");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.out + bad.err).find("--token-inflight-limit: \"0\""), std::string::npos)
      << bad.out << bad.err;
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
