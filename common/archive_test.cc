#include "common/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <clocale>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/paths.h"

namespace tide {
namespace {

namespace fs = std::filesystem;

// One hand-made tar entry.
struct Entry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string data;
  int perm = 0644;
  std::string symlink;   // for AE_IFLNK
  std::string hardlink;  // makes this a hard link entry
  int64_t size = -1;     // header size; -1 = data.size()
};

Entry File(std::string name, std::string data, int perm = 0644) {
  Entry e;
  e.name = std::move(name);
  e.data = std::move(data);
  e.perm = perm;
  return e;
}
Entry Dir(std::string name) {
  Entry e;
  e.name = std::move(name);
  e.type = AE_IFDIR;
  e.perm = 0755;
  return e;
}
Entry Symlink(std::string name, std::string target) {
  Entry e;
  e.name = std::move(name);
  e.type = AE_IFLNK;
  e.perm = 0777;
  e.symlink = std::move(target);
  return e;
}
Entry Hardlink(std::string name, std::string target) {
  Entry e;
  e.name = std::move(name);
  e.hardlink = std::move(target);
  return e;
}
Entry Special(std::string name, mode_t type) {
  Entry e;
  e.name = std::move(name);
  e.type = type;
  return e;
}

// Builds a tar (gzip-compressed unless `gzip` is false) with libarchive's
// write API, so tests can make archives PackDirectory would never produce.
std::string BuildArchive(const std::vector<Entry>& entries, bool gzip = true) {
  std::string out;
  struct archive* a = archive_write_new();
  if (gzip) archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  archive_write_set_bytes_in_last_block(a, 1);  // no padding: truncation tests cut real data
  auto cb = [](struct archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  EXPECT_EQ(archive_write_open(a, &out, nullptr, cb, nullptr), ARCHIVE_OK);
  for (const Entry& e : entries) {
    struct archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.name.c_str());
    archive_entry_set_filetype(ae, e.type);
    archive_entry_set_perm(ae, e.perm);
    if (!e.symlink.empty()) archive_entry_set_symlink(ae, e.symlink.c_str());
    if (!e.hardlink.empty()) archive_entry_set_hardlink(ae, e.hardlink.c_str());
    if (e.type == AE_IFCHR || e.type == AE_IFBLK) {
      archive_entry_set_rdevmajor(ae, 1);
      archive_entry_set_rdevminor(ae, 3);
    }
    int64_t size = e.size >= 0 ? e.size : static_cast<int64_t>(e.data.size());
    if (e.type == AE_IFREG && e.hardlink.empty()) archive_entry_set_size(ae, size);
    EXPECT_GE(archive_write_header(a, ae), ARCHIVE_WARN) << archive_error_string(a);
    if (!e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(ae);
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return out;
}

// Incompressible bytes, so a cut in the gzip stream lands inside the data.
std::string Noise(size_t n) {
  std::string out(n, '\0');
  uint32_t x = 12345;
  for (auto& c : out) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

// Relative path -> ("d" or "f" + mode bits + content) for every entry under root.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(root)) {
    std::string rel = fs::relative(e.path(), root).generic_string();
    auto st = e.symlink_status();
    if (fs::is_directory(st)) {
      out[rel] = "d";
    } else if (fs::is_regular_file(st)) {
      bool exec = (static_cast<unsigned>(st.permissions()) & 0100) != 0;
      out[rel] = std::string("f") + (exec ? "x:" : "-:") + *ReadFile(e.path().string());
    } else {
      out[rel] = "other";
    }
  }
  return out;
}

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tide_archive_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    src_ = root_ + "/src";
    dest_ = root_ + "/dest";
    fs::create_directories(src_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void Write(const std::string& rel, const std::string& data, int mode = 0644) {
    ASSERT_TRUE(WriteFileAtomic(src_ + "/" + rel, data, mode).ok());
  }

  // The archive is refused by both entry points and nothing is written.
  void ExpectRefused(const std::string& archive, const std::string& what,
                     const ArchiveLimits& limits = {}) {
    Status v = ValidateArchive(archive, limits);
    EXPECT_FALSE(v.ok()) << what << " passed validation";
    if (!v.ok()) {
      EXPECT_EQ(v.code(), Code::kInvalidArgument) << what << ": " << v.ToString();
    }
    Status u = UnpackArchive(archive, dest_, limits);
    EXPECT_FALSE(u.ok()) << what << " was unpacked";
    EXPECT_TRUE(!fs::exists(dest_) || fs::is_empty(dest_)) << what << " left files in dest";
    EXPECT_FALSE(fs::exists(root_ + "/evil")) << what << " escaped dest";
    std::error_code ec;
    fs::remove_all(dest_, ec);
  }

  std::string root_, src_, dest_;
};

TEST_F(ArchiveTest, PackThenUnpackIsIdentical) {
  Write("top.txt", "hello\n");
  Write("bin/run.sh", "#!/bin/sh\necho hi\n", 0755);
  Write("a/b/c/deep.bin", Noise(300000));
  Write("zero.txt", "");
  Write("dir with space/ünï.txt", "unicode");
  fs::create_directories(src_ + "/empty");

  auto packed = PackDirectory(src_);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->substr(0, 2), "\x1f\x8b");  // gzip magic
  ASSERT_TRUE(ValidateArchive(*packed).ok());
  Status s = UnpackArchive(*packed, dest_);
  ASSERT_TRUE(s.ok()) << s.ToString();

  auto want = Snapshot(src_);
  auto got = Snapshot(dest_);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got["bin/run.sh"].substr(0, 3), "fx:");
  EXPECT_EQ(got["top.txt"].substr(0, 3), "f-:");
  EXPECT_EQ(got["empty"], "d");
  EXPECT_EQ(got.size(), 11u);
}

TEST_F(ArchiveTest, PackEmptyDirectory) {
  auto packed = PackDirectory(src_);
  ASSERT_TRUE(packed.ok());
  ASSERT_TRUE(UnpackArchive(*packed, dest_).ok());
  EXPECT_TRUE(fs::is_directory(dest_));
  EXPECT_TRUE(fs::is_empty(dest_));
}

TEST_F(ArchiveTest, FilesAreOpenedBeneathTheDirectoryNeverThroughALink) {
  Write("a/b/c.txt", "inside");
  fs::create_directories(root_ + "/elsewhere/b");
  std::ofstream(root_ + "/elsewhere/b/c.txt") << "outside";
  int dir = ::open(src_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  int64_t size = 0;
  auto fd = OpenRegularBeneath(dir, "a/b/c.txt", &size);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(size, 6);
  ::close(*fd);
  // The walk saw a directory; by the time it is read it is a link.
  fs::rename(src_ + "/a", root_ + "/was-a");
  fs::create_directory_symlink(root_ + "/elsewhere", src_ + "/a");
  EXPECT_FALSE(OpenRegularBeneath(dir, "a/b/c.txt", &size).ok());
  fs::create_symlink(root_ + "/elsewhere/b/c.txt", src_ + "/link.txt");
  EXPECT_FALSE(OpenRegularBeneath(dir, "link.txt", &size).ok());
  ASSERT_EQ(::mkfifo((src_ + "/fifo").c_str(), 0644), 0);
  EXPECT_FALSE(OpenRegularBeneath(dir, "fifo", &size).ok());
  for (const char* bad : {"../elsewhere/b/c.txt", "", "/etc/passwd", "//c.txt", "./link.txt"}) {
    auto r = OpenRegularBeneath(dir, bad, &size);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("not a path below the directory"), std::string::npos)
        << bad << ": " << r.status().message();
  }
  ::close(dir);
}

TEST_F(ArchiveTest, UnpackIntoDestWithTrailingSlash) {
  Write("a/b.txt", "x");
  auto packed = PackDirectory(src_);
  ASSERT_TRUE(packed.ok());
  // Regression: the symlink walk used to loop forever at "/" for "dest/".
  ASSERT_TRUE(UnpackArchive(*packed, dest_ + "/").ok());
  EXPECT_EQ(*ReadFile(dest_ + "/a/b.txt"), "x");
}

TEST_F(ArchiveTest, PackRefusesSymlinksAndSpecialFiles) {
  Write("ok.txt", "x");
  fs::create_symlink("/etc/passwd", src_ + "/passwd");
  auto packed = PackDirectory(src_);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("symlink"), std::string::npos);

  fs::remove(src_ + "/passwd");
  fs::create_directories(root_ + "/elsewhere");
  fs::create_directory_symlink(root_ + "/elsewhere", src_ + "/linkdir");
  EXPECT_FALSE(PackDirectory(src_).ok());

  fs::remove(src_ + "/linkdir");
  ASSERT_EQ(::mkfifo((src_ + "/fifo").c_str(), 0644), 0);
  EXPECT_FALSE(PackDirectory(src_).ok());

  EXPECT_FALSE(PackDirectory(root_ + "/missing").ok());
  EXPECT_FALSE(PackDirectory(src_ + "/ok.txt").ok());
}

TEST_F(ArchiveTest, ExcludedEntriesStayOutAndExtraFilesGoIn) {
  Write("keep.txt", "k");
  Write("skip.log", "s");
  Write("cache/big.bin", "b");
  fs::create_symlink("/etc/passwd", src_ + "/passwd");
  std::vector<std::string> visited, skipped;
  PackOptions options;
  options.exclude = [&](const std::string& rel, bool is_dir) {
    visited.push_back(rel + (is_dir ? "/" : ""));
    return rel == "skip.log" || rel == "cache";
  };
  options.extra_files = {{".tide/sbatch/run.sh", "#!/bin/sh\n"}};
  options.skip_other_files = true;
  options.skipped = &skipped;
  auto packed = PackDirectory(src_, options);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  ASSERT_TRUE(UnpackArchive(*packed, dest_).ok());
  auto got = Snapshot(dest_);
  EXPECT_EQ(got.count("keep.txt"), 1u);
  EXPECT_EQ(got.count("skip.log"), 0u);
  EXPECT_EQ(got.count("cache"), 0u);
  EXPECT_EQ(got[".tide/sbatch/run.sh"].substr(0, 3), "fx:");
  EXPECT_EQ(skipped, std::vector<std::string>{"passwd"});
  // An excluded directory is not entered.
  EXPECT_EQ(std::count(visited.begin(), visited.end(), "cache/big.bin"), 0);

  // An extra file may not replace one of the directory's.
  options.extra_files = {{"keep.txt", "x"}};
  EXPECT_FALSE(PackDirectory(src_, options).ok());
}

TEST_F(ArchiveTest, HandMadeArchiveWithDotPrefixesUnpacks) {
  // What `tar czf code.tgz .` produces.
  std::string a = BuildArchive(
      {Dir("./"), File("./main.py", "print(1)\n"), Dir("./pkg/"), File("./pkg/mod.py", "x = 1\n")});
  ASSERT_TRUE(ValidateArchive(a).ok());
  ASSERT_TRUE(UnpackArchive(a, dest_).ok());
  EXPECT_EQ(*ReadFile(dest_ + "/main.py"), "print(1)\n");
  EXPECT_EQ(*ReadFile(dest_ + "/pkg/mod.py"), "x = 1\n");
}

TEST_F(ArchiveTest, Utf8PaxNamesUnpackInAnyLocale) {
  // bsdtar writes non-ASCII names as UTF-8 pax attributes; in the C locale
  // libarchive warns that it cannot convert them, which is not damage.
  if (!std::setlocale(LC_CTYPE, "C.UTF-8")) GTEST_SKIP() << "no C.UTF-8 locale";
  std::string out = BuildArchive({File("d/\xc3\xbcn.txt", "x")});
  std::setlocale(LC_CTYPE, "C");

  Status s = UnpackArchive(out, dest_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*ReadFile(dest_ + "/d/\xc3\xbcn.txt"), "x");
}

TEST_F(ArchiveTest, PlainTarIsAccepted) {
  std::string a = BuildArchive({File("f.txt", "plain")}, /*gzip=*/false);
  ASSERT_TRUE(UnpackArchive(a, dest_).ok());
  EXPECT_EQ(*ReadFile(dest_ + "/f.txt"), "plain");
}

TEST_F(ArchiveTest, RefusesTraversalNames) {
  ExpectRefused(BuildArchive({File("ok.txt", "x"), File("../evil", "pwned")}), "../evil");
  ExpectRefused(BuildArchive({File("ok.txt", "x"), File("a/../../evil", "pwned")}), "a/../../evil");
  ExpectRefused(BuildArchive({File("./../evil", "pwned")}), "./../evil");
  ExpectRefused(BuildArchive({File("ok.txt", "x"), File(root_ + "/evil", "pwned")}),
                "absolute name");
  ExpectRefused(BuildArchive({File("/abs", "pwned")}), "/abs");
  ExpectRefused(BuildArchive({Dir("../evil/")}), "../evil/ directory");
  ExpectRefused(BuildArchive({File("a\\..\\evil", "x")}), "backslash name");
  ExpectRefused(BuildArchive({File("a\nb", "x")}), "control character");
}

TEST_F(ArchiveTest, RefusesLinksAndDevices) {
  ExpectRefused(BuildArchive({File("ok.txt", "x"), Symlink("link", root_ + "/evil")}), "symlink");
  ExpectRefused(
      BuildArchive({File("ok.txt", "x"), Symlink("link", "../../evil"), File("link/x", "pwned")}),
      "symlink then write through it");
  ExpectRefused(BuildArchive({File("ok.txt", "x"), Hardlink("hard", "ok.txt")}), "hard link");
  ExpectRefused(BuildArchive({Hardlink("hard", "/etc/passwd")}), "hard link to an absolute path");
  ExpectRefused(BuildArchive({File("ok.txt", "x"), Special("null", AE_IFCHR)}), "char device");
  ExpectRefused(BuildArchive({Special("disk", AE_IFBLK)}), "block device");
  ExpectRefused(BuildArchive({Special("pipe", AE_IFIFO)}), "fifo");
}

TEST_F(ArchiveTest, RefusesConflictingEntries) {
  // A file, then a directory entry or a file beneath it: the second cannot be
  // created, so the archive must fail validation instead of half-unpacking.
  ExpectRefused(BuildArchive({File("a", "x"), File("a/b", "y")}), "file under file");
  ExpectRefused(BuildArchive({File("a", "x"), Dir("a")}), "directory over file");
  ExpectRefused(BuildArchive({File("a/b", "x"), File("a", "y")}), "file over directory");
  ExpectRefused(BuildArchive({File("a", "x"), File("./a", "y")}), "duplicate file");
  // Repeated directory entries are harmless.
  std::string ok = BuildArchive({Dir("d"), Dir("d/"), File("d/f", "z")});
  EXPECT_TRUE(ValidateArchive(ok).ok());
}

TEST_F(ArchiveTest, RefusesCorruptArchives) {
  Write("a.txt", Noise(100000));
  Write("b/c.txt", "see");
  auto packed = PackDirectory(src_);
  ASSERT_TRUE(packed.ok());

  ExpectRefused("", "empty input");
  ExpectRefused("this is not an archive at all, just some text", "garbage");
  ExpectRefused(std::string("\x1f\x8b\x08\x00garbage after a gzip magic", 30), "bad gzip");
  ExpectRefused(packed->substr(0, packed->size() / 2), "truncated gzip");
  ExpectRefused(packed->substr(0, 20), "truncated header");

  // A plain tar whose last member is cut short.
  std::string tar = BuildArchive({File("big", std::string(5000, 'b'))}, /*gzip=*/false);
  ExpectRefused(tar.substr(0, 512 + 1000), "truncated tar member");
}

TEST_F(ArchiveTest, EnforcesEntryAndSizeLimits) {
  for (int i = 0; i < 5; ++i) Write("f" + std::to_string(i), std::string(100, 'x'));
  auto packed = PackDirectory(src_);
  ASSERT_TRUE(packed.ok());

  ArchiveLimits few;
  few.max_entries = 4;
  ExpectRefused(*packed, "too many entries", few);
  EXPECT_NE(ValidateArchive(*packed, few).message().find("entries"), std::string::npos);
  few.max_entries = 5;
  EXPECT_TRUE(ValidateArchive(*packed, few).ok());

  ArchiveLimits small;
  small.max_unpacked_bytes = 499;
  ExpectRefused(*packed, "too many bytes", small);
  EXPECT_NE(ValidateArchive(*packed, small).message().find("bytes"), std::string::npos);
  small.max_unpacked_bytes = 500;
  EXPECT_TRUE(ValidateArchive(*packed, small).ok());

  // The header's size counts, not what was actually stored (libarchive pads
  // the unwritten body with zeros, which gzip shrinks to almost nothing).
  std::string bomb = BuildArchive({[] {
    Entry e = File("zeros", "");
    e.size = 1 << 20;
    return e;
  }()});
  EXPECT_LT(bomb.size(), 4096u);
  ArchiveLimits tiny;
  tiny.max_unpacked_bytes = 1000;
  ExpectRefused(bomb, "1 MiB of zeros", tiny);
}

TEST_F(ArchiveTest, UnpackRefusesSymlinkPlantedInDest) {
  fs::create_directories(dest_);
  fs::create_directories(root_ + "/outside");
  fs::create_directory_symlink(root_ + "/outside", dest_ + "/sub");
  std::string a = BuildArchive({File("sub/file", "x")});
  EXPECT_FALSE(UnpackArchive(a, dest_).ok());
  EXPECT_FALSE(fs::exists(root_ + "/outside/file"));

  fs::create_symlink(root_ + "/outside/target", dest_ + "/file");
  std::string b = BuildArchive({File("file", "x")});
  EXPECT_FALSE(UnpackArchive(b, dest_).ok());
  EXPECT_FALSE(fs::exists(root_ + "/outside/target"));
}

}  // namespace
}  // namespace tide
