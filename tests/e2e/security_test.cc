// Users cannot see each other's work; bad input gets a clear 4xx naming the
// field, and leaves nothing behind.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include "api/http_client.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

// A .tar.gz with one entry of the given type and name.
std::string EvilArchive(const std::string& name, unsigned type, const std::string& link = "") {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  archive_write_open(
      a, &out, nullptr,
      [](struct archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
        static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
        return static_cast<la_ssize_t>(n);
      },
      nullptr);
  struct archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, name.c_str());
  archive_entry_set_filetype(e, type);
  archive_entry_set_perm(e, 0644);
  if (!link.empty()) archive_entry_set_symlink(e, link.c_str());
  archive_entry_set_size(e, type == AE_IFREG ? 4 : 0);
  archive_write_header(a, e);
  if (type == AE_IFREG) archive_write_data(a, "evil", 4);
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "2xRTX4090:24GB");
    alice_token_ = cluster_.NewUser("alice");
    bob_token_ = cluster_.NewUser("bob");
    alice_ = cluster_.ClientFor(alice_token_);
    bob_ = cluster_.ClientFor(bob_token_);
    http_ = std::move(api::HttpClient::Create(cluster_.url(), *api::Client::TrustFromEnvironment())).value();
  }
  api::HttpResponse Raw(const std::string& method, const std::string& target,
                        const std::string& body, const std::string& token,
                        const std::string& content_type = "application/json") {
    std::map<std::string, std::string> h;
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    if (!content_type.empty()) h["Content-Type"] = content_type;
    auto r = http_->Do(method, target, body, h);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : api::HttpResponse{};
  }
  // POST /v1/jobs with `body`; expects 400 naming `field`.
  void ExpectRejected(const std::string& body, const std::string& field) {
    auto r = Raw("POST", "/v1/jobs", body, alice_token_);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["code"], "invalid_argument");
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_EQ(j["error"].value("field", ""), field) << body << " -> " << r.body;
  }
  Cluster cluster_;
  std::string alice_token_, bob_token_;
  std::unique_ptr<api::Client> alice_, bob_;
  std::unique_ptr<api::HttpClient> http_;
};

TEST_F(SecurityTest, UsersCannotSeeEachOthersJobs) {
  auto job = alice_->SubmitJob(Spec(
      {{"command", "mkdir -p $TIDE_OUTPUT_DIR && echo secret > $TIDE_OUTPUT_DIR/s.txt; echo secret"},
       {"resources", {{"gpu_count", 1}}}}));
  ASSERT_TRUE(job.ok());
  auto done = WaitTerminal(*alice_, job->id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  ASSERT_EQ(*alice_->GetOutput(job->id, "s.txt"), "secret\n");

  EXPECT_TRUE(bob_->GetJob(job->id).status().IsNotFound());
  EXPECT_TRUE(bob_->GetLogs(job->id).status().IsNotFound());
  EXPECT_TRUE(bob_->ListOutputs(job->id).status().IsNotFound());
  EXPECT_TRUE(bob_->GetOutput(job->id, "s.txt").status().IsNotFound());
  EXPECT_TRUE(bob_->CancelJob(job->id).status().IsNotFound());
  EXPECT_TRUE(bob_->ListJobs({})->jobs.empty());
  auto follow = Raw("GET", "/v1/jobs/" + job->id + "/logs?follow=true", "", bob_token_, "");
  EXPECT_EQ(follow.status, 404);
  auto cli = cluster_.Cli({"status", job->id}, bob_token_);
  EXPECT_NE(cli.exit_code, 0);
  // Agents' tokens cannot read users' jobs either.
  auto as_admin_route = Raw("GET", "/v1/jobs/" + job->id, "", "tide_n_bogus", "");
  EXPECT_EQ(as_admin_route.status, 401);
}

TEST_F(SecurityTest, MissingOrBadTokenIs401) {
  EXPECT_EQ(Raw("GET", "/v1/jobs", "", "", "").status, 401);
  EXPECT_EQ(Raw("GET", "/v1/jobs", "", "tide_u_0000", "").status, 401);
  EXPECT_EQ(Raw("POST", "/v1/jobs", R"({"command":["true"]})", "wrong").status, 401);
  EXPECT_EQ(Raw("POST", "/v1/admin/users", R"({"name":"eve"})", alice_token_).status, 403);
}

TEST_F(SecurityTest, BadJobSpecsNameTheField) {
  ExpectRejected("{not json", "body");
  ExpectRejected("[1,2]", "body");
  ExpectRejected(R"({"command":["true"],"gpu_cont":1})", "gpu_cont");
  ExpectRejected(R"({"command":["true"],"resources":{"gpu_cont":1}})", "resources.gpu_cont");
  ExpectRejected(R"({"command":["true"],"resources":{"gpu_count":"two"}})", "resources.gpu_count");
  ExpectRejected(R"({"command":["true"],"resources":{"gpu_count":0}})", "resources.gpu_count");
  ExpectRejected(R"({"command":["true"],"resources":{"gpu_count":-2}})", "resources.gpu_count");
  ExpectRejected(R"({"command":["true"],"max_runtime":"5 fortnights"})", "max_runtime");
  ExpectRejected(R"({"command":["true"],"max_runtime":-5})", "max_runtime");
  ExpectRejected(R"({"command":[]})", "command");
  ExpectRejected(R"({"command":[1,2]})", "command[0]");
  ExpectRejected(R"({"name":"x"})", "command");
  ExpectRejected(R"({"command":["true"],"resources":{"memory":"-3GB"}})", "resources.memory");
  ExpectRejected(R"({"command":["true"],"env":{"1BAD":"x"}})", "env.1BAD");
  ExpectRejected(R"({"command":["true"],"code":"0123"})", "code");
  ExpectRejected(R"({"command":["true"],"code":")" + std::string(64, 'a') + R"("})", "code");
  // Nothing half-written: no job exists after all those rejections.
  EXPECT_TRUE(alice_->ListJobs({})->jobs.empty());
  auto bad_query = Raw("GET", "/v1/jobs?status=sleeping", "", alice_token_, "");
  EXPECT_EQ(bad_query.status, 400);
  EXPECT_NE(bad_query.body.find("\"field\":\"status\""), std::string::npos);
  EXPECT_EQ(Raw("GET", "/v1/jobs?limit=-1", "", alice_token_, "").status, 400);
}

TEST_F(SecurityTest, OversizedBodyIs413) {
  std::string big = R"({"command":["true"],"name":")" + std::string(2 << 20, 'x') + R"("})";
  auto r = Raw("POST", "/v1/jobs", big, alice_token_);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("too_large"), std::string::npos);
  EXPECT_TRUE(alice_->ListJobs({})->jobs.empty());
}

TEST_F(SecurityTest, MaliciousCodeArchivesAreRefused) {
  for (auto& archive : {EvilArchive("../evil.sh", AE_IFREG), EvilArchive("/etc/evil", AE_IFREG),
                        EvilArchive("link", AE_IFLNK, "/etc/passwd"), std::string("not a tarball")}) {
    auto r = Raw("POST", "/v1/code", archive, alice_token_, "application/gzip");
    EXPECT_EQ(r.status, 400) << r.body;
  }
  auto ok = alice_->UploadCode(EvilArchive("fine.txt", AE_IFREG));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST_F(SecurityTest, OutputPathsCannotEscape) {
  // Act as an agent: register a node with a GPU type nobody else has.
  auto join = cluster_.admin().CreateJoinToken();
  auto agent = cluster_.ClientFor(join->token);
  api::RegisterRequest reg;
  reg.name = "fake-agent";
  reg.gpus.push_back({0, "T4", "T4", 16384, "GPU-x", -1, -1, -1});
  auto r = agent->Register(reg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  agent->set_token((*r)["node_token"]);
  auto job = alice_->SubmitJob(Spec({{"command", {"true"}}, {"resources", {{"gpu_type", "T4"}}}}));
  ASSERT_TRUE(job.ok());
  auto work = agent->PollWork(5);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->assignments.size(), 1u);
  for (std::string path : {"../../escape.txt", "/etc/escape", "a/../../b"}) {
    Status st = agent->PutOutput(job->id, 1, path, "x");
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << path << ": " << st.ToString();
  }
  EXPECT_TRUE(agent->PutOutput(job->id, 1, "ok/file.txt", "x").ok());
  EXPECT_TRUE(alice_->ListOutputs(job->id)->size() == 1);
  auto traversal = Raw("GET", "/v1/jobs/" + job->id + "/outputs/..%2F..%2Fadmin.token", "",
                       alice_token_, "");
  EXPECT_EQ(traversal.status, 400) << traversal.body;
  // A node may not touch another node's job.
  auto other = cluster_.admin().CreateJoinToken();
  auto intruder = cluster_.ClientFor(other->token);
  reg.name = "intruder";
  auto r2 = intruder->Register(reg);
  intruder->set_token((*r2)["node_token"]);
  EXPECT_TRUE(intruder->PutOutput(job->id, 1, "x.txt", "x").IsNotFound());
  EXPECT_FALSE(intruder->PostEvent(job->id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(alice_->GetJob(job->id)->status, api::JobStatus::kStarting);
}

}  // namespace
}  // namespace tide::e2e
