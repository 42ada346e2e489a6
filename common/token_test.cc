#include "common/token.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tide {
namespace {

bool IsLowerHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

TEST(Token, NewTokenHasPrefixAnd256Bits) {
  std::string t = NewToken("tide_u_");
  ASSERT_EQ(t.size(), 7u + 64u);
  EXPECT_EQ(t.rfind("tide_u_", 0), 0u);
  EXPECT_TRUE(IsLowerHex(t.substr(7))) << t;
  EXPECT_EQ(NewToken("").size(), 64u);
}

TEST(Token, NewTokensAreUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(NewToken("tide_a_")).second);
}

TEST(Token, NewIdIsPrefixPlus12Hex) {
  std::string id = NewId("j-");
  ASSERT_EQ(id.size(), 2u + 12u);
  EXPECT_EQ(id.rfind("j-", 0), 0u);
  EXPECT_TRUE(IsLowerHex(id.substr(2))) << id;
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(NewId("j-")).second);
}

TEST(Token, RandomHexLengthAndAlphabet) {
  EXPECT_EQ(RandomHex(0), "");
  for (size_t n : {1u, 4u, 16u, 33u}) {
    std::string h = RandomHex(n);
    EXPECT_EQ(h.size(), 2 * n);
    EXPECT_TRUE(IsLowerHex(h)) << h;
  }
  EXPECT_NE(RandomHex(16), RandomHex(16));
}

TEST(Token, Sha256KnownVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Binary data with embedded NUL is hashed in full.
  EXPECT_NE(Sha256Hex(std::string("a\0b", 3)), Sha256Hex("a"));
}

TEST(Token, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secre"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secrets"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
  std::string t = NewToken("tide_u_");
  EXPECT_TRUE(ConstantTimeEquals(Sha256Hex(t), Sha256Hex(std::string(t))));
}

TEST(Token, IdNamesTheKindAndHidesTheSecret) {
  std::string join = NewToken("tide_j_");
  std::string id = TokenId(join);
  EXPECT_EQ(id, "jt-" + Sha256Hex(join).substr(0, 12));
  EXPECT_EQ(id, TokenId(join)) << "the same token always has the same id";
  EXPECT_EQ(id.find(join.substr(7, 12)), std::string::npos);
  EXPECT_EQ(TokenId(NewToken("tide_u_")).substr(0, 3), "ut-");
  EXPECT_EQ(TokenId("odd").substr(0, 2), "t-");
}

}  // namespace
}  // namespace tide
