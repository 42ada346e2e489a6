#include "server/blob_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace tide::server {
namespace {

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-blob-XXXXXX";
    dir_ = mkdtemp(tmpl);
    blobs_ = std::make_unique<BlobStore>(dir_);
    ASSERT_TRUE(blobs_->Init().ok());
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
  std::unique_ptr<BlobStore> blobs_;
};

TEST_F(BlobStoreTest, LogAppendIsIdempotentByOffset) {
  ASSERT_TRUE(blobs_->AppendLog("j", 1, 0, 0, "hello ").ok());
  ASSERT_TRUE(blobs_->AppendLog("j", 1, 0, 0, "hello ").ok());  // retry
  ASSERT_TRUE(blobs_->AppendLog("j", 1, 0, 3, "lo world").ok());  // overlap
  EXPECT_EQ(*blobs_->ReadLog("j", 1, 0, 0), "hello world");
  EXPECT_EQ(blobs_->AppendLog("j", 1, 0, 100, "gap").code(), Code::kConflict);
  EXPECT_EQ(*blobs_->ReadLog("j", 1, 0, 6), "world");
  EXPECT_EQ(*blobs_->ReadLog("j", 2, 0, 0), "");
  // Each rank of a gang has its own log.
  ASSERT_TRUE(blobs_->AppendLog("j", 1, 1, 0, "rank one").ok());
  EXPECT_EQ(*blobs_->ReadLog("j", 1, 1, 0), "rank one");
  EXPECT_EQ(*blobs_->ReadLog("j", 1, 0, 0), "hello world");
}

TEST_F(BlobStoreTest, OutputsCannotEscape) {
  ASSERT_TRUE(blobs_->PutOutput("j", "a/b.txt", "x").ok());
  EXPECT_EQ(blobs_->PutOutput("j", "../../etc/x", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(blobs_->PutOutput("j", "/etc/x", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(blobs_->GetOutput("j", "../j/a/b.txt").status().code(), Code::kInvalidArgument);
  auto files = blobs_->ListOutputs("j");
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].path, "a/b.txt");
  EXPECT_EQ(*blobs_->GetOutput("j", "a/b.txt"), "x");
}

TEST_F(BlobStoreTest, CodeIsPerOwnerAndContentAddressed) {
  auto id = blobs_->PutCode("u-1", "archive-bytes");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->size(), 64u);
  EXPECT_TRUE(blobs_->HasCode("u-1", *id));
  EXPECT_FALSE(blobs_->HasCode("u-2", *id));
}

TEST_F(BlobStoreTest, DeletingAJobLeavesNothingOfItAndNothingElseGoes) {
  for (const std::string job : {"j-1", "j-2"}) {
    ASSERT_TRUE(blobs_->AppendLog(job, 1, 0, 0, "log").ok());
    ASSERT_TRUE(blobs_->AppendLog(job, 2, 1, 0, "rank 1").ok());
    ASSERT_TRUE(blobs_->AppendLog(job, 1, 0, 0, "{}\n", Stream::kMetrics).ok());
    ASSERT_TRUE(blobs_->PutOutput(job, "a/b.txt", "x").ok());
    ASSERT_TRUE(blobs_->StageCheckpoint(job, 0, 1, "ckpt").ok());
    ASSERT_TRUE(blobs_->CommitCheckpoint(job, 0, 1).ok());
  }
  auto code = blobs_->PutCode("u-1", "archive-bytes");
  ASSERT_TRUE(blobs_->DeleteJob("j-1").ok());
  ASSERT_TRUE(blobs_->DeleteJob("j-1").ok()) << "deleting again is not an error";
  ASSERT_TRUE(blobs_->DeleteCode("u-1", *code).ok());
  EXPECT_FALSE(blobs_->HasCode("u-1", *code));
  std::string left;
  for (const char* sub : {"logs", "metrics", "checkpoints", "outputs"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/" + sub)) {
      left += e.path().string() + "\n";
    }
  }
  EXPECT_EQ(left.find("j-1"), std::string::npos) << left;
  EXPECT_EQ(*blobs_->ReadLog("j-2", 2, 1, 0), "rank 1");
  EXPECT_EQ(*blobs_->GetCheckpoint("j-2", 0), "ckpt");
  EXPECT_EQ(blobs_->DeleteJob("../logs").code(), Code::kInvalidArgument);
  EXPECT_EQ(blobs_->DeleteJob("").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tide::server
