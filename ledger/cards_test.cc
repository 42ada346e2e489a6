#include "ledger/cards.h"

#include <gtest/gtest.h>

#include <set>

#include "common/token.h"

namespace tide::ledger {
namespace {

std::string NewCardCode() { return CardCodeFrom(RandomHex(kCardRandomBytes)); }

TEST(Cards, CodesAreRandomTypableAndChecked) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    std::string code = NewCardCode();
    ASSERT_EQ(code.size(), 4 + 7 * 5u) << code;  // TIDE + 7 groups of "-XXXX"
    EXPECT_TRUE(seen.insert(code).second);
    auto canonical = CanonicalCardCode(code);
    ASSERT_TRUE(canonical.ok()) << code << ": " << canonical.status().ToString();
    EXPECT_EQ(canonical->size(), 28u);
  }
  std::string code = *seen.begin();
  std::string canonical = *CanonicalCardCode(code);
  // Typed in lower case, without dashes, without the prefix: the same card.
  std::string lower;
  for (char c : code.substr(5)) {
    if (c != '-') lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  EXPECT_EQ(*CanonicalCardCode(lower), canonical);
  EXPECT_EQ(CardHash(canonical), CardHash(*CanonicalCardCode(lower)));
  EXPECT_NE(CardHash(canonical), canonical);
}

TEST(Cards, TyposAreCaughtNotLookedUp) {
  std::string canonical = *CanonicalCardCode(NewCardCode());
  int caught = 0;
  for (size_t i = 0; i < canonical.size(); ++i) {
    std::string typo = canonical;
    typo[i] = typo[i] == 'Z' ? 'Y' : 'Z';
    auto r = CanonicalCardCode(typo);
    if (!r.ok()) {
      ++caught;
      EXPECT_EQ(r.status().field(), "code");
    }
  }
  EXPECT_GE(caught, 26);  // a 10-bit check misses about one typo in a thousand
  EXPECT_FALSE(CanonicalCardCode("TIDE-1234").ok());
  EXPECT_NE(CanonicalCardCode(canonical.substr(0, 27) + "U").status().message().find("'U'"),
            std::string::npos);
}

}  // namespace
}  // namespace tide::ledger
