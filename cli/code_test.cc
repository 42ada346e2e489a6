// A directory as a job's code (cli/code.h): git's ignore rules, what is
// always left out, the size limit.
#include "cli/code.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>

#include "common/archive.h"
#include "common/paths.h"

namespace tide::cli {
namespace {
namespace fs = std::filesystem;

TEST(GlobTest, GitsWildcards) {
  EXPECT_TRUE(GlobMatch("*.pyc", "a.pyc"));
  EXPECT_FALSE(GlobMatch("*.pyc", "dir/a.pyc")) << "* never crosses /";
  EXPECT_TRUE(GlobMatch("data/*.bin", "data/x.bin"));
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
  EXPECT_FALSE(GlobMatch("a?c", "a/c"));
  EXPECT_TRUE(GlobMatch("run[0-9]", "run7"));
  EXPECT_FALSE(GlobMatch("run[!0-9]", "run7"));
  EXPECT_TRUE(GlobMatch("**/cache", "cache"));
  EXPECT_TRUE(GlobMatch("**/cache", "a/b/cache"));
  EXPECT_TRUE(GlobMatch("a/**/b", "a/b"));
  EXPECT_TRUE(GlobMatch("a/**/b", "a/x/y/b"));
  EXPECT_TRUE(GlobMatch("logs/**", "logs/2024/x.txt"));
  EXPECT_FALSE(GlobMatch("logs/**", "logs"));
  EXPECT_TRUE(GlobMatch("\\*literal", "*literal"));
  EXPECT_FALSE(GlobMatch("\\*literal", "xliteral"));
}

TEST(IgnoreRulesTest, ReadsAGitignoreAsGitDoes) {
  IgnoreRules r;
  r.Add("# comment\n\n*.pyc\n/build/\ncheckpoints/\n!keep.pyc\ndata/*.bin\n\\#hash\nspace\\ \n");
  EXPECT_TRUE(r.Ignored("a.pyc", false));
  EXPECT_TRUE(r.Ignored("src/deep/a.pyc", false)) << "a name matches at any depth";
  EXPECT_FALSE(r.Ignored("keep.pyc", false)) << "! re-includes; the last match decides";
  EXPECT_TRUE(r.Ignored("build", true));
  EXPECT_FALSE(r.Ignored("src/build", true)) << "a leading / anchors";
  EXPECT_FALSE(r.Ignored("build", false)) << "a trailing / matches only directories";
  EXPECT_TRUE(r.Ignored("runs/checkpoints", true));
  EXPECT_TRUE(r.Ignored("data/x.bin", false));
  EXPECT_FALSE(r.Ignored("other/data/x.bin", false)) << "a / inside anchors too";
  EXPECT_TRUE(r.Ignored("#hash", false));
  EXPECT_TRUE(r.Ignored("space ", false));
  EXPECT_FALSE(r.Ignored("train.py", false));
}

TEST(IgnoreRulesTest, ANestedGitignoreAppliesBelowItsDirectory) {
  IgnoreRules r;
  r.Add("*.log\n");
  r.Add("!important.log\n/local.txt\n", "sub");
  EXPECT_TRUE(r.Ignored("a.log", false));
  EXPECT_FALSE(r.Ignored("sub/important.log", false));
  EXPECT_TRUE(r.Ignored("important.log", false));
  EXPECT_TRUE(r.Ignored("sub/local.txt", false));
  EXPECT_FALSE(r.Ignored("local.txt", false));
}

class PackCodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-code-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& rel, const std::string& data) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/" + rel, data, 0644).ok());
  }
  std::set<std::string> Unpacked(const std::string& archive) {
    const std::string out = dir_ + "-out";
    fs::remove_all(out);
    EXPECT_TRUE(UnpackArchive(archive, out).ok());
    std::set<std::string> names;
    for (auto& e : fs::recursive_directory_iterator(out)) {
      if (e.is_regular_file()) names.insert(e.path().lexically_relative(out).generic_string());
    }
    fs::remove_all(out);
    return names;
  }
  std::string dir_;
};

TEST_F(PackCodeTest, LeavesOutGitTideAndWhatGitignoreNames) {
  Write("train.py", "print(1)\n");
  Write(".gitignore", "*.ckpt\nwandb/\n");
  Write("model.ckpt", "big");
  Write("wandb/run/log.txt", "x");
  Write(".git/HEAD", "ref");
  Write("vendor/lib/.git", "gitdir: elsewhere");  // a submodule's
  Write("vendor/lib/a.py", "");
  Write(".tide/tide.db", "dev data");
  Write("sub/.gitignore", "secret.txt\n");
  Write("sub/secret.txt", "s");
  Write("sub/ok.txt", "o");
  auto packed = PackCode(dir_, {});
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(Unpacked(packed->archive),
            (std::set<std::string>{".gitignore", "train.py", "vendor/lib/a.py", "sub/.gitignore",
                                   "sub/ok.txt"}));
  EXPECT_EQ(packed->files, 5);
}

TEST_F(PackCodeTest, ATooLargeDirectoryNamesItsSizeTheLimitAndTheLargest) {
  Write("train.py", "print(1)\n");
  Write("data/blob.bin", std::string(300 << 10, 'x'));
  Write("ignored.bin", std::string(300 << 10, 'x'));
  Write(".gitignore", "ignored.bin\n");
  CodeOptions options;
  options.max_bytes = 200 << 10;
  auto packed = PackCode(dir_, options);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), Code::kTooLarge);
  const std::string& m = packed.status().message();
  EXPECT_NE(m.find("300.0 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("limit of 200.0 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("data/ 300.0 KiB"), std::string::npos) << m;

  options.max_bytes = 400 << 10;  // what .gitignore leaves out does not count
  EXPECT_TRUE(PackCode(dir_, options).ok());
}

TEST_F(PackCodeTest, ExtraFilesAndNoDirectory) {
  Write("train.py", "");
  fs::create_symlink("/etc/hostname", dir_ + "/link");
  CodeOptions options;
  options.extra_files = {{".tide/sbatch/job.sh", "#!/bin/sh\n"}};
  options.skip_other_files = true;
  auto packed = PackCode(dir_, options);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(Unpacked(packed->archive), (std::set<std::string>{"train.py", ".tide/sbatch/job.sh"}));
  EXPECT_EQ(packed->skipped, std::vector<std::string>{"link"});

  auto alone = PackCode("", options);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(Unpacked(alone->archive), (std::set<std::string>{".tide/sbatch/job.sh"}));

  EXPECT_FALSE(PackCode(dir_ + "/missing", options).ok());
}

}  // namespace
}  // namespace tide::cli
