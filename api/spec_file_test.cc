#include "api/spec_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/paths.h"

namespace tide::api {
namespace {

namespace fs = std::filesystem;

class SpecFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tide_spec_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string WriteSpec(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomic(path, text).ok());
    return path;
  }

  json Load(const std::string& name, const std::string& text) {
    auto r = LoadSpecFile(WriteSpec(name, text));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json();
  }

  // Loading fails; the message starts with "<path>:<line>: " (or "<path>: "
  // when line is 0, "<path>:<any line of the file>:" when it is -1) and
  // contains `part`. The error is kept in last_.
  void LoadError(const std::string& name, const std::string& text, int line,
                 const std::string& part = "") {
    std::string path = WriteSpec(name, text);
    auto r = LoadSpecFile(path);
    EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
    last_ = r.ok() ? Status::Ok() : r.status();
    if (r.ok()) return;
    const Status& s = last_;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    if (line < 0) {  // some line of the file
      ASSERT_EQ(s.message().rfind(path + ":", 0), 0u) << s.message();
      int got = std::atoi(s.message().c_str() + path.size() + 1);
      EXPECT_GE(got, 1) << s.message();
      EXPECT_LE(got, std::count(text.begin(), text.end(), '\n') + 1) << s.message();
    } else {
      std::string prefix = line > 0 ? path + ":" + std::to_string(line) + ": " : path + ": ";
      EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << s.message() << "\nwant prefix " << prefix;
    }
    if (!part.empty()) {
      EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
    }
  }

  std::string dir_;
  Status last_;
};

TEST_F(SpecFileTest, YamlLoadsToApiJson) {
  json j = Load("job.yaml", R"(# a training run
name: train-llama
image: pytorch/pytorch:2.3
command:
  - python
  - train.py
  - --epochs
  - "3"
env:
  WANDB_MODE: offline
resources:
  gpu_type: [A100, H100]
  gpu_count: 2
  gpu_memory: 80GB
  cpus: 16
  memory: 256GB
max_runtime: 2h
grace: 90
tags: [sweep, llama]
)");
  json want = json::parse(R"({
    "name": "train-llama", "image": "pytorch/pytorch:2.3",
    "command": ["python", "train.py", "--epochs", "3"],
    "env": {"WANDB_MODE": "offline"},
    "resources": {"gpu_type": ["A100", "H100"], "gpu_count": 2, "gpu_memory": "80GB",
                  "cpus": 16, "memory": "256GB"},
    "max_runtime": "2h", "grace": 90, "tags": ["sweep", "llama"]})");
  EXPECT_EQ(j, want);
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->resources.gpu_memory_mb, 81920);
}

TEST_F(SpecFileTest, JsonLoads) {
  std::string text = R"({
  "name": "x",
  "command": ["echo", "hi \u00e9"],
  "resources": {"gpu_count": 1, "gpu_type": "RTX 4090", "cpus": 2.5},
  "max_runtime": 3600,
  "env": {"A": "1"},
  "tags": []
})";
  json j = Load("job.json", text);
  EXPECT_EQ(j, json::parse(text));
  // Compact JSON, as another program would write it.
  std::string compact = R"({"name":"y","command":"echo hi","resources":{"gpu_count":2}})";
  EXPECT_EQ(Load("compact.json", compact), json::parse(compact));
}

TEST_F(SpecFileTest, QuotedScalarsStayStrings) {
  json j = Load("job.yaml", R"(
name: "123"
command: ["echo", '42', 7x]
resources:
  gpu_count: 2
  gpu_type: "4090"
env:
  EPOCHS: "10"
  FLAG: "true"
  EMPTY: ""
  NUL: "null"
)");
  EXPECT_TRUE(j["name"].is_string());
  EXPECT_EQ(j["name"], "123");
  EXPECT_EQ(j["command"], json({"echo", "42", "7x"}));
  EXPECT_TRUE(j["resources"]["gpu_count"].is_number_integer());
  EXPECT_EQ(j["resources"]["gpu_count"], 2);
  EXPECT_EQ(j["resources"]["gpu_type"], "4090");
  EXPECT_EQ(j["env"], json({{"EPOCHS", "10"}, {"FLAG", "true"}, {"EMPTY", ""}, {"NUL", "null"}}));
}

TEST_F(SpecFileTest, PlainScalarTypes) {
  auto doc = ParseYamlDocument(R"(
i: 2
neg: -5
f: 2.5
t: true
n: null
tilde: ~
empty:
hex: 0x1F
inf: -inf
nan: nan
huge: 1e999
yes: yes
s: hello world
)",
                               "t.yaml");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const json& j = doc->value;
  EXPECT_EQ(j["i"], 2);
  EXPECT_TRUE(j["i"].is_number_integer());
  EXPECT_EQ(j["neg"], -5);
  EXPECT_EQ(j["f"], 2.5);
  EXPECT_EQ(j["t"], true);
  EXPECT_TRUE(j["n"].is_null());
  EXPECT_TRUE(j["tilde"].is_null());
  EXPECT_TRUE(j["empty"].is_null());
  // Only decimal numbers are numbers; YAML 1.1 "yes" is not a boolean.
  EXPECT_EQ(j["hex"], "0x1F");
  EXPECT_EQ(j["inf"], "-inf");
  EXPECT_EQ(j["nan"], "nan");
  EXPECT_EQ(j["huge"], "1e999");
  EXPECT_EQ(j["yes"], "yes");
  EXPECT_EQ(j["s"], "hello world");
  EXPECT_EQ(doc->lines.at("i"), 2);
  EXPECT_EQ(doc->lines.at("s"), 14);
}

TEST_F(SpecFileTest, InvalidFieldReportsFileLineAndField) {
  LoadError("job.yaml", R"(name: x
command: [python, train.py]
resources:
  gpu_type: A100
  gpu_count: 0
)",
            5, "resources.gpu_count: must be at least 1");
  EXPECT_EQ(last_.field(), "resources.gpu_count");

  LoadError("typo.yaml", "command: [a]\nresources:\n  gpu_count: 1\n  gpu_cont: 2\n", 4,
            "resources.gpu_cont: unknown field");
  LoadError("top.yaml", "command: [a]\n\n\ngpus: 2\n", 4, "gpus: unknown field");
  LoadError("dur.yaml", "command: [a]\nmax_runtime: 5 fortnights\n", 2, "max_runtime");
  LoadError("type.yaml", "command: [a]\nresources:\n  gpu_count: two\n", 3, "must be an integer");
  // Errors inside lists point at the element's line.
  LoadError("list.yaml", "command:\n  - python\n  - 3\n", 3, "command[1]: must be a string");
  LoadError("empty0.yaml", "command:\n  - ''\n  - x\n", 2, "command[0]");
  LoadError("env.yaml", "command: [a]\nenv:\n  OK: x\n  1BAD: y\n", 4, "env.1BAD");
  // A required field that is missing has no line: the file alone is named.
  LoadError("missing.yaml", "name: x\n", 0, "command: is required");
  // JSON files get lines too.
  LoadError("job.json",
            "{\n  \"command\": [\"a\"],\n  \"resources\": {\n    \"gpu_count\": 65\n  }\n}\n", 4,
            "at most 64");
}

TEST_F(SpecFileTest, DuplicateKeysAreRefused) {
  LoadError("dup.yaml", "command: [a]\nname: x\nname: y\n", 3, "duplicate key \"name\"");
  LoadError("dup2.yaml", "command: [a]\nresources:\n  gpu_count: 1\n  gpu_count: 2\n", 4,
            "duplicate key \"gpu_count\"");
  LoadError("dup.json", "{\"command\": [\"a\"],\n \"command\": [\"b\"]}", 2, "duplicate key");
}

TEST_F(SpecFileTest, MalformedYamlReportsLine) {
  LoadError("bad.yaml", "name: x\ncommand: [a, b\nresources:\n  gpu_count: 1\n", -1);
  LoadError("bad2.yaml", "name: x\ncommand: [a]\n  bad: indent: here\n", -1);
  LoadError("bad3.yaml", "name: x\ncommand: [a]\nenv: {A: \"unterminated\n", -1);
  auto doc = ParseYamlDocument("a: 1\nb: [1, 2\n", "f.yaml");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message().rfind("f.yaml:", 0), 0u) << doc.status().message();
  // The line is a number in range.
  std::string rest = doc.status().message().substr(7);
  int line = std::stoi(rest);
  EXPECT_GE(line, 1);
  EXPECT_LE(line, 3);

  auto tab = ParseYamlDocument("a:\n\t- x\n", "tab.yaml");
  EXPECT_FALSE(tab.ok());
}

// Found by spec_yaml_fuzz: a byte that is not UTF-8 was read into the
// spec, and writing the spec as JSON then threw.
TEST_F(SpecFileTest, TextThatIsNotUtf8IsRefusedNamingTheLine) {
  auto doc = ParseYamlDocument("name: x\ncommand: [ech\xff]\n", "job.yaml");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message(), "job.yaml:2: not valid UTF-8 (byte 0xFF)");
  EXPECT_TRUE(ParseYamlDocument("name: caf\xc3\xa9\n", "job.yaml").ok());
  // Found by spec_yaml_fuzz and batch_fuzz: with NUL bytes the YAML reader
  // took the file for UTF-32 and made text that was not UTF-8.
  auto nul = ParseYamlDocument(std::string("name: x\ncommand: a\0b\n", 20), "job.yaml");
  ASSERT_FALSE(nul.ok());
  EXPECT_EQ(nul.status().message(), "job.yaml:2: a NUL byte: a spec file is UTF-8 text");
}

TEST_F(SpecFileTest, NonMappingDocumentIsRefused) {
  LoadError("list.yaml", "- python\n- train.py\n", 0, "mapping");
  LoadError("scalar.yaml", "python train.py\n", 0, "mapping");
  LoadError("empty.yaml", "", 0, "mapping");
  LoadError("comment.yaml", "# nothing here\n", 0, "mapping");
  LoadError("array.json", "[1, 2]", 0, "mapping");
}

// The examples of docs/spec.md, kept in step with it.
TEST_F(SpecFileTest, DocExamplesLoad) {
  json from_json = Load("full.json", R"({
  "name": "llama-sweep-3",
  "image": "host",
  "command": ["python3", "train.py", "--lr", "3e-4"],
  "env": {"WANDB_MODE": "offline", "EPOCHS": "3"},
  "resources": {
    "gpu_count": 4,
    "gpu_type": ["A100", "H100"],
    "gpu_memory": "80GB",
    "cpus": 32,
    "memory": "256GB"
  },
  "max_runtime": "12h",
  "grace": "2m",
  "code": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
  "tags": ["sweep", "llama"]
})");
  json from_yaml = Load("full.yaml", R"(name: llama-sweep-3
image: host
command: [python3, train.py, --lr, "3e-4"]
env:
  WANDB_MODE: offline
  EPOCHS: "3"          # quoted: env values are strings
resources:
  gpu_count: 4
  gpu_type: [A100, H100]
  gpu_memory: 80GB
  cpus: 32
  memory: 256GB
max_runtime: 12h
grace: 2m
code: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
tags: [sweep, llama]
)");
  EXPECT_EQ(from_yaml, from_json);
  auto spec = JobSpecFromJson(from_yaml);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->max_runtime_s, 12 * 3600);
  EXPECT_EQ(spec->grace_s, 120);
  EXPECT_EQ(spec->resources.memory_mb, 256 * 1024);

  json small = Load("small.yaml",
                    "command: nvidia-smi && python3 -c \"import torch; "
                    "print(torch.cuda.is_available())\"\n");
  auto s = JobSpecFromJson(small);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->command, (std::vector<std::string>{"/bin/sh", "-c",
                                                  "nvidia-smi && python3 -c \"import torch; "
                                                  "print(torch.cuda.is_available())\""}));

  // The README's example.
  json readme = Load("readme.yaml", R"(name: train-resnet
command: ["python3", "train.py", "--epochs", "3"]
resources:
  gpu_type: RTX4090
  gpu_count: 2
  gpu_memory: 24GB
max_runtime: 2h
env:
  WANDB_MODE: offline
)");
  EXPECT_TRUE(JobSpecFromJson(readme).ok());
}

TEST_F(SpecFileTest, MissingFile) {
  auto r = LoadSpecFile(dir_ + "/nope.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
}

TEST_F(SpecFileTest, NonScalarKeysAreRefused) {
  LoadError("key.yaml", "command: [a]\n? [x, y]\n: 1\n", 2, "keys must be plain names");
}

// Nested aliases (a "billion laughs") are refused, not expanded.
TEST(SpecFileAliases, ExpandingPastAMillionValuesIsRefused) {
  std::string text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string prev = "a";
  for (char c = 'b'; c <= 'i'; ++c) {
    text += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) text += (i ? ", *" : "*") + prev;
    text += "]\n";
    prev = std::string(1, c);
  }
  auto doc = ParseYamlDocument(text, "bomb.yaml");
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("bomb.yaml: too many values once its aliases are expanded"),
            std::string::npos)
      << doc.status().ToString();
  // A few aliases are fine.
  EXPECT_TRUE(ParseYamlDocument("a: &a [1, 2]\nb: *a\n", "ok.yaml").ok());
}

}  // namespace
}  // namespace tide::api
