#include "common/tls.h"

#include <gtest/gtest.h>

#include <ctime>

namespace tide::tls {
namespace {

TEST(Tls, SelfSignedCertificateCarriesItsKeysPin) {
  auto key = NewKey();
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  int64_t now = time(nullptr);
  auto cert = SelfSigned({*key, {"gpu.example.org", "127.0.0.1", "::1"}, now - 60, now + 86400});
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(cert->rfind("-----BEGIN CERTIFICATE-----", 0), 0u);
  auto info = Inspect(*cert);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  auto pin = PinOfKey(*key);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(info->pin, *pin);
  EXPECT_TRUE(IsPin(info->pin)) << info->pin;
  EXPECT_EQ(info->fingerprint.size(), 32u * 3 - 1);  // AB:CD:... over 32 bytes
  EXPECT_EQ(info->not_before_s, now - 60);
  EXPECT_EQ(info->not_after_s, now + 86400);

  // Renewed with the same key: same pin, another fingerprint.
  auto renewed = SelfSigned({*key, {"gpu.example.org"}, now, now + 2 * 86400});
  ASSERT_TRUE(renewed.ok());
  auto again = Inspect(*renewed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pin, info->pin);
  EXPECT_NE(again->fingerprint, info->fingerprint);
  // Another key: another pin.
  auto other = NewKey();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*PinOfKey(*other), info->pin);
}

TEST(Tls, BadInputIsRefusedByName) {
  EXPECT_FALSE(Inspect("not a certificate").ok());
  EXPECT_FALSE(PinOfKey("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").ok());
  EXPECT_FALSE(SelfSigned({"junk", {}, 0, 1}).ok());
  auto key = NewKey();
  ASSERT_TRUE(key.ok());
  EXPECT_FALSE(SelfSigned({*key, {"a,b"}, 0, 1}).ok());
}

TEST(Tls, Pins) {
  std::string good = "sha256:" + std::string(64, 'a');
  EXPECT_TRUE(IsPin(good));
  EXPECT_FALSE(IsPin("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsPin("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(IsPin("sha1:" + std::string(64, 'a')));
  EXPECT_FALSE(IsPin(std::string(64, 'a')));
  auto two = ParsePins(good + "," + "sha256:" + std::string(64, 'b'), "--pin");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  auto bad = ParsePins(good + ",sha256:xyz", "--pin");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "--pin");
  EXPECT_NE(bad.status().message().find("\"sha256:xyz\" is not a pin"), std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(ParsePins("", "--pin")->empty());
}

TEST(Tls, JoinTokensCarryPins) {
  std::string a = "sha256:" + std::string(64, 'a'), b = "sha256:" + std::string(64, 'b');
  std::string t = JoinTokenWithPins("tide_j_123", {a, b});
  EXPECT_EQ(t, "tide_j_123." + std::string(64, 'a') + "." + std::string(64, 'b'));
  auto parts = SplitJoinToken(t, "--join-token");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->secret, "tide_j_123");
  EXPECT_EQ(parts->pins, (std::vector<std::string>{a, b}));
  auto bare = SplitJoinToken("tide_j_123", "--join-token");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->pins.empty());
  auto cut = SplitJoinToken("tide_j_123." + std::string(60, 'a'), "--join-token");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().field(), "--join-token");
  EXPECT_NE(cut.status().message().find("copy the whole token"), std::string::npos);
}

}  // namespace
}  // namespace tide::tls
