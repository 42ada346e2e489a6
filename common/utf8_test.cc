#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace tide {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  for (const char* ok : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x9a\x80",
                         "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(ValidUtf8(ok)) << ok;
  }
}

TEST(Utf8, NamesTheFirstBadByte) {
  struct Case {
    std::string text;
    size_t bad;
  };
  for (const Case& c : {Case{"ab\xff", 2}, Case{"\x80", 0}, Case{"a\xc3", 1},   // truncated
                        Case{"\xc0\xaf", 0},                                      // overlong '/'
                        Case{"x\xe0\x80\xaf", 1},                                 // overlong
                        Case{"\xed\xa0\x80", 0},                                  // a surrogate
                        Case{"ok\xf4\x90\x80\x80", 2},                            // past U+10FFFF
                        Case{"\xe2\x28\xa1", 0}}) {                               // bad continuation
    size_t bad = 999;
    EXPECT_FALSE(ValidUtf8(c.text, &bad)) << c.text;
    EXPECT_EQ(bad, c.bad) << c.text;
  }
}

}  // namespace
}  // namespace tide
