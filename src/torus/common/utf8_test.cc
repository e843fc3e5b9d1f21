#include "torus/common/utf8.h"

#include <gtest/gtest.h>

namespace torus {
namespace utf8_test {

TEST(Utf8Test, ValidText) {
  for (const char* ok : {"", "plain", "gr\xc3\xbc\xc3\x9f" "e", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(IsValidUtf8(ok)) << ok;
    EXPECT_EQ(ToValidUtf8(ok), ok);
  }
}

TEST(Utf8Test, InvalidBytesBecomeQuestionMarks) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"ok \xff\xfe done", "ok ?? done"},
      {"\xc0\xaf", "??"},              // overlong '/'
      {"\xe0\x80\xaf", "???"},         // overlong
      {"\xed\xa0\x80", "???"},         // a surrogate
      {"\xf4\x90\x80\x80", "????"},    // above U+10FFFF
      {"cut \xf0\x9f\x98", "cut ???"},  // a sequence cut short
      {"\x80x", "?x"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(IsValidUtf8(c.in)) << c.in;
    EXPECT_EQ(ToValidUtf8(c.in), c.out);
    EXPECT_TRUE(IsValidUtf8(ToValidUtf8(c.in)));
  }
}

TEST(Utf8Test, SequenceAtTellsWholeFromCutFromBroken) {
  EXPECT_EQ(Utf8SequenceAt(""), 0);
  EXPECT_EQ(Utf8SequenceAt("a"), 1);
  EXPECT_EQ(Utf8SequenceAt("\xc3\xa9x"), 2);
  EXPECT_EQ(Utf8SequenceAt("\xf0\x9f\x9a\x80"), 4);
  EXPECT_EQ(Utf8SequenceAt("\xf0\x9f\x9a"), 0);  // cut short: may be completed
  EXPECT_EQ(Utf8SequenceAt("\xe2"), 0);
  EXPECT_EQ(Utf8SequenceAt("\xe2\x41"), -1);      // broken
  EXPECT_EQ(Utf8SequenceAt("\xed\xa0\x80"), -1);  // a surrogate
  EXPECT_EQ(Utf8SequenceAt("\xc0\xaf"), -1);      // overlong
  EXPECT_EQ(Utf8SequenceAt("\xff"), -1);
}

}  // namespace utf8_test
}  // namespace torus
