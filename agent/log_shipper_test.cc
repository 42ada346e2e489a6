#include "agent/log_shipper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace tide::agent
