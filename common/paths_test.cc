#include "common/paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tide {
namespace {

namespace fs = std::filesystem;

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "tide_paths_XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

std::string Clean(std::string_view p) {
  auto r = CleanRelativePath(p);
  EXPECT_TRUE(r.ok()) << "\"" << p << "\": " << r.status().ToString();
  return r.ok() ? *r : "<error>";
}

TEST(CleanRelativePath, AcceptsAndNormalises) {
  EXPECT_EQ(Clean("a"), "a");
  EXPECT_EQ(Clean("a/b"), "a/b");
  EXPECT_EQ(Clean("a/b.txt"), "a/b.txt");
  EXPECT_EQ(Clean("./a//b"), "a/b");
  EXPECT_EQ(Clean("a/./b/"), "a/b");
  EXPECT_EQ(Clean("dir/"), "dir");
  EXPECT_EQ(Clean("..a/b..c/...d"), "..a/b..c/...d");  // dots inside names are fine
  EXPECT_EQ(Clean("spaces are ok/ünïcode"), "spaces are ok/ünïcode");
  EXPECT_EQ(Clean(std::string(1024, 'x')), std::string(1024, 'x'));
}

TEST(CleanRelativePath, Rejects) {
  const std::string cases[] = {
      "",      "/etc/passwd", "/",         "..",     "../x",
      "a/..",  "a/../b",      "a/../../b", "./../x", "a\\b",
      "..\\x", ".",           "./",        "//",     std::string("a\0b", 3),
      "a\nb",  "a\tb",        "a\x1b[31m", "a\x7f",  std::string(1025, 'x'),
  };
  for (const auto& bad : cases) {
    auto r = CleanRelativePath(bad);
    EXPECT_FALSE(r.ok()) << "accepted \"" << bad << "\" as \"" << (r.ok() ? *r : "") << "\"";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
}

TEST_F(TempDirTest, WriteFileAtomicThenReadFileRoundTrips) {
  std::string path = dir_ + "/sub/dir/file.bin";
  std::string data("binary\0data\xff\n", 13);
  ASSERT_TRUE(WriteFileAtomic(path, data).ok());
  auto back = ReadFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);

  // Overwrite replaces the whole content, and leaves no temporary files.
  ASSERT_TRUE(WriteFileAtomic(path, "short").ok());
  EXPECT_EQ(*ReadFile(path), "short");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir_ + "/sub/dir")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);

  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(*ReadFile(path), "");
}

TEST_F(TempDirTest, WriteFileAtomicSetsMode) {
  std::string secret = dir_ + "/secret";
  ASSERT_TRUE(WriteFileAtomic(secret, "token", 0600).ok());
  struct stat st {};
  ASSERT_EQ(::stat(secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  std::string script = dir_ + "/run.sh";
  ASSERT_TRUE(WriteFileAtomic(script, "#!/bin/sh\n", 0755).ok());
  ASSERT_EQ(::stat(script.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  // The default is 0644, and the mode is exact whatever the umask.
  mode_t old = ::umask(077);
  std::string plain = dir_ + "/plain";
  Status s = WriteFileAtomic(plain, "x");
  ::umask(old);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(::stat(plain.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(TempDirTest, WriteFileAtomicFailsCleanly) {
  // The parent is a regular file, so neither the directory nor the file can exist.
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/file", "x").ok());
  Status s = WriteFileAtomic(dir_ + "/file/child", "y");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInternal);
}

TEST_F(TempDirTest, ReadFileMissingIsNotFound) {
  auto r = ReadFile(dir_ + "/missing");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
}

}  // namespace
}  // namespace tide
