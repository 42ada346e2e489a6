// The command line of `tide sbatch` (cli/sbatch.h).
#include "cli/sbatch.h"

#include <gtest/gtest.h>

namespace tide::cli {
namespace {

using Words = std::vector<std::string>;

TEST(SbatchCommandLineTest, TideAndSbatchOptionsInAnyOrderBeforeTheScript) {
  for (const Words& words : {
           Words{"--code", ".", "-N", "2", "--time=5", "run.sh", "a", "--code", "b"},
           Words{"-N", "2", "--code=.", "--time=5", "run.sh", "a", "--code", "b"},
           Words{"-N", "2", "--time=5", "--code", ".", "run.sh", "a", "--code", "b"},
       }) {
    auto line = ParseSbatchCommandLine(words);
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    EXPECT_EQ(line->script, "run.sh");
    EXPECT_EQ(line->options, (Words{"-N", "2", "--time=5"}));
    EXPECT_EQ(line->script_args, (Words{"a", "--code", "b"})) << "after the script: its own";
    EXPECT_EQ(line->code_dir, ".");
    EXPECT_TRUE(line->code_chosen);
  }
}

TEST(SbatchCommandLineTest, TheSubmitDirectoryIsTheDefault) {
  auto line = ParseSbatchCommandLine({"-J", "x", "run.sh"});
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line->code_dir, ".");
  EXPECT_FALSE(line->code_chosen);
  EXPECT_EQ(line->options, (Words{"-J", "x"}));

  line = ParseSbatchCommandLine({"--no-code", "--parsable", "run.sh"});
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line->code_dir, "");
  EXPECT_TRUE(line->code_chosen);
  EXPECT_EQ(line->options, (Words{"--parsable"}));

  line = ParseSbatchCommandLine({"--code", "../proj", "run.sh"});
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line->code_dir, "../proj");
}

TEST(SbatchCommandLineTest, MistakesAreRefused) {
  EXPECT_FALSE(ParseSbatchCommandLine({}).ok());
  EXPECT_FALSE(ParseSbatchCommandLine({"-N", "2"}).ok());
  EXPECT_FALSE(ParseSbatchCommandLine({"--code"}).ok());
  EXPECT_FALSE(ParseSbatchCommandLine({"--code="}).ok());
  auto both = ParseSbatchCommandLine({"--code", ".", "--no-code", "run.sh"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("--no-code"), std::string::npos);
}

}  // namespace
}  // namespace tide::cli
