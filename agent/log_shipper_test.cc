#include "agent/log_shipper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace tide::agent {
namespace {

class LogShipperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-log-shipper-XXXXXX";
    fd_ = mkstemp(tmpl);
    ASSERT_GE(fd_, 0);
    unlink(tmpl);
  }
  void TearDown() override { close(fd_); }
  void Append(const std::string& s) {
    ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
    written_ += static_cast<int64_t>(s.size());
  }

  int fd_ = -1;
  int64_t written_ = 0;
};

// A fake server log: accepts a chunk only at the offset it expects (or an
// already-stored prefix, idempotently), like the real endpoint.
struct FakeServerLog {
  std::string data;
  int fail_next = 0;
  int posts = 0;
  Status Post(int64_t offset, std::string_view chunk) {
    ++posts;
    if (fail_next > 0) {
      --fail_next;
      return Status::Unavailable("server restarting");
    }
    if (offset > static_cast<int64_t>(data.size())) return Status::Conflict("gap");
    std::string_view have = std::string_view(data).substr(static_cast<size_t>(offset));
    if (have.size() >= chunk.size()) return Status::Ok();  // a retry of stored bytes
    data += chunk.substr(have.size());
    return Status::Ok();
  }
};

TEST_F(LogShipperTest, ShipsInChunksWithOffsets) {
  FakeServerLog server;
  std::vector<int64_t> offsets;
  LogShipper shipper(
      fd_,
      [&](int64_t off, std::string_view d) {
        offsets.push_back(off);
        return server.Post(off, d);
      },
      4);
  Append("hello world\n");
  ASSERT_TRUE(shipper.Ship(written_).ok());
  EXPECT_EQ(server.data, "hello world\n");
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(shipper.sent(), 12);
  ASSERT_TRUE(shipper.Ship(written_).ok());  // nothing new: no POST
  EXPECT_EQ(offsets.size(), 3u);
}

TEST_F(LogShipperTest, FailuresNeitherLoseNorDuplicateBytes) {
  FakeServerLog server;
  LogShipper shipper(
      fd_, [&](int64_t off, std::string_view d) { return server.Post(off, d); }, 8);
  std::string expected;
  for (int round = 0; round < 50; ++round) {
    std::string line = "line " + std::to_string(round) + "\n";
    Append(line);
    expected += line;
    server.fail_next = round % 3;  // some rounds fail once or twice first
    Status st = shipper.Ship(written_);
    while (!st.ok()) {
      EXPECT_EQ(st.code(), Code::kUnavailable);
      st = shipper.Ship(written_);
    }
  }
  EXPECT_EQ(server.data, expected);
  EXPECT_EQ(shipper.sent(), written_);
}

TEST_F(LogShipperTest, ErrorsKeepBytesPending) {
  int calls = 0;
  LogShipper shipper(fd_, [&](int64_t, std::string_view) {
    ++calls;
    return Status::NotFound("job gone");
  });
  Append("abc");
  Status st = shipper.Ship(written_);
  EXPECT_TRUE(st.IsNotFound());
  EXPECT_EQ(shipper.sent(), 0);
  EXPECT_EQ(calls, 1);
}

// What the server must end with: every occurrence of every value in the
// whole text overwritten, found in the text as written.
std::string MaskedWhole(const std::string& text, const std::vector<std::string>& masks) {
  std::string out = text;
  for (const std::string& m : masks) {
    for (size_t at = text.find(m); at != std::string::npos; at = text.find(m, at + 1)) {
      std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(at), m.size(), '*');
    }
  }
  return out;
}

TEST_F(LogShipperTest, MasksSecretsAndKeepsOffsets) {
  FakeServerLog server;
  LogShipper shipper(fd_, [&](int64_t off, std::string_view d) { return server.Post(off, d); });
  shipper.set_masks({"hf_s3cret", "", "pa55word"});
  Append("token=hf_s3cret and pa55word twice: hf_s3cret\n");
  ASSERT_TRUE(shipper.Ship(written_, /*complete=*/true).ok());
  EXPECT_EQ(server.data, "token=********* and ******** twice: *********\n");
  EXPECT_EQ(shipper.sent(), written_);
}

TEST_F(LogShipperTest, HoldsBackWhatMayBeginASecret) {
  FakeServerLog server;
  LogShipper shipper(fd_, [&](int64_t off, std::string_view d) { return server.Post(off, d); });
  shipper.set_masks({"hf_s3cret"});
  Append("the token is hf_s3");
  ASSERT_TRUE(shipper.Ship(written_).ok());
  EXPECT_EQ(server.data, "the token ");  // 8 bytes (the longest value - 1) wait
  EXPECT_TRUE(shipper.HasToSend(written_, /*complete=*/true));
  EXPECT_FALSE(shipper.HasToSend(written_));
  Append("cret, it is\n");
  ASSERT_TRUE(shipper.Ship(written_, /*complete=*/true).ok());
  EXPECT_EQ(server.data, "the token is *********, it is\n");
}

TEST_F(LogShipperTest, MasksAcrossChunksAndRetries) {
  FakeServerLog server;
  LogShipper shipper(
      fd_, [&](int64_t off, std::string_view d) { return server.Post(off, d); }, 3);
  shipper.set_masks({"abcdefgh", "efghij"});  // overlapping values are both masked
  Append("xxabcdefghijyy");
  server.fail_next = 2;
  Status st = shipper.Ship(written_, true);
  while (!st.ok()) st = shipper.Ship(written_, true);
  EXPECT_EQ(server.data, "xx**********yy");
}

// Random text, random values planted in it, random appends, chunk sizes and
// failures: the server ends with exactly the text masked as a whole.
TEST_F(LogShipperTest, MasksWhateverTheSplits) {
  for (int seed = 1; seed <= 40; ++seed) {
    std::srand(static_cast<unsigned>(seed));
    ASSERT_EQ(ftruncate(fd_, 0), 0);
    ASSERT_EQ(lseek(fd_, 0, SEEK_SET), 0);
    written_ = 0;
    std::vector<std::string> masks = {"SECRET", "s3cr3t-value-long", "ab"};
    std::string text;
    while (text.size() < 3000) {
      if (std::rand() % 5 == 0) text += masks[static_cast<size_t>(std::rand()) % masks.size()];
      else text += static_cast<char>("abcSs3-\n"[std::rand() % 8]);
    }
    FakeServerLog server;
    LogShipper shipper(
        fd_,
        [&](int64_t off, std::string_view d) { return server.Post(off, d); },
        static_cast<size_t>(1 + std::rand() % 64));
    shipper.set_masks(masks);
    size_t at = 0;
    while (at < text.size()) {
      size_t n = std::min(text.size() - at, static_cast<size_t>(1 + std::rand() % 200));
      Append(text.substr(at, n));
      at += n;
      server.fail_next = std::rand() % 2;
      (void)shipper.Ship(written_);
    }
    Status st = shipper.Ship(written_, true);
    while (!st.ok()) st = shipper.Ship(written_, true);
    ASSERT_EQ(server.data, MaskedWhole(text, masks)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tide::agent
