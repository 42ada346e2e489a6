// TlsFiles: a self-signed server's keys and certificate, the pins it
// announces, renewal, rotation to the next key and change detection.
#include "server/tls_files.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "common/paths.h"
#include "common/tls.h"

namespace tide::server {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/tide-tls-files-XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

std::string PinOfKeyFile(const std::string& path) {
  auto key = ReadFile(path);
  if (!key.ok()) return "";
  auto pin = tls::PinOfKey(*key);
  return pin.ok() ? *pin : "";
}

TEST(TlsFiles, SelfSignedMakesItsKeysOnceAndAnnouncesTheNext) {
  std::string dir = TempDir() + "/tls";
  TlsFiles files({"", "", "", /*self_signed=*/true, dir, "127.0.0.1:7460"});
  ASSERT_TRUE(files.Prepare().ok());
  std::string key_pin = PinOfKeyFile(dir + "/key.pem"), next_pin = PinOfKeyFile(dir + "/next-key.pem");
  ASSERT_FALSE(key_pin.empty());
  ASSERT_FALSE(next_pin.empty());
  EXPECT_NE(key_pin, next_pin);
  EXPECT_EQ(files.pins(), (std::vector<std::string>{key_pin, next_pin}));
  EXPECT_EQ(std::filesystem::status(dir).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_EQ(std::filesystem::status(dir + "/key.pem").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_FALSE(files.Changed());

  // A second start keeps everything: same pins.
  TlsFiles again({"", "", "", true, dir, "127.0.0.1:7460"});
  ASSERT_TRUE(again.Prepare().ok());
  EXPECT_EQ(again.pins(), files.pins());
}

TEST(TlsFiles, RotatingToTheNextKeyIsNoticedAndMakesANewNextKey) {
  std::string dir = TempDir() + "/tls";
  TlsFiles files({"", "", "", true, dir, "127.0.0.1:7460"});
  ASSERT_TRUE(files.Prepare().ok());
  std::string next_pin = files.pins()[1];
  std::filesystem::rename(dir + "/next-key.pem", dir + "/key.pem");
  EXPECT_TRUE(files.Changed());
  ASSERT_TRUE(files.Prepare().ok());
  EXPECT_FALSE(files.Changed());
  ASSERT_EQ(files.pins().size(), 2u);
  EXPECT_EQ(files.pins()[0], next_pin);  // the certificate is now the next key's
  auto cert = tls::Inspect(*ReadFile(dir + "/cert.pem"));
  ASSERT_TRUE(cert.ok());
  EXPECT_EQ(cert->pin, next_pin);
  EXPECT_NE(files.pins()[1], next_pin);
  EXPECT_EQ(files.pins()[1], PinOfKeyFile(dir + "/next-key.pem"));
}

TEST(TlsFiles, ASelfSignedCertificateNearItsEndIsRenewedWithTheSameKey) {
  std::string dir = TempDir() + "/tls";
  std::filesystem::create_directories(dir);
  auto key = tls::NewKey();
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/key.pem", *key, 0600).ok());
  int64_t now = time(nullptr);
  auto old = tls::SelfSigned({*key, {"localhost"}, now - 400 * 86400, now + 10 * 86400});
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/cert.pem", *old).ok());
  TlsFiles files({"", "", "", true, dir, "127.0.0.1:7460"});
  ASSERT_TRUE(files.Prepare().ok());
  auto cert = tls::Inspect(*ReadFile(dir + "/cert.pem"));
  ASSERT_TRUE(cert.ok());
  EXPECT_GT(cert->not_after_s, now + 300 * 86400);
  EXPECT_EQ(cert->pin, *tls::PinOfKey(*key));  // renewed, same pin
}

TEST(TlsFiles, GivenFilesAndABadNextKeyAreNamed) {
  std::string dir = TempDir();
  auto key = tls::NewKey();
  int64_t now = time(nullptr);
  auto cert = tls::SelfSigned({*key, {"localhost"}, now - 60, now + 86400});
  ASSERT_TRUE(WriteFileAtomic(dir + "/c.pem", *cert).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/k.pem", *key, 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/next.pem", "not a key", 0600).ok());
  TlsFiles bad({dir + "/c.pem", dir + "/k.pem", dir + "/next.pem", false, "", ""});
  Status st = bad.Prepare();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("--tls-next-key"), std::string::npos) << st.ToString();

  TlsFiles given({dir + "/c.pem", dir + "/k.pem", "", false, "", ""});
  ASSERT_TRUE(given.Prepare().ok());
  EXPECT_EQ(given.pins(), (std::vector<std::string>{*tls::PinOfKey(*key)}));
  // Replacing the certificate file is a change.
  auto renewed = tls::SelfSigned({*key, {"localhost"}, now - 60, now + 2 * 86400});
  ASSERT_TRUE(WriteFileAtomic(dir + "/c.pem", *renewed).ok());
  EXPECT_TRUE(given.Changed());
}

}  // namespace
}  // namespace tide::server
