#include "torus/rpc/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

namespace torus::rpc {
namespace auth_test {

TEST(AuthTest, BearerMatchesExactly) {
  EXPECT_TRUE(BearerMatches("Bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerMatches("bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));
}

TEST(AuthTest, TokenFileIsCreatedPrivateAndReused) {
  char tmpl[] = "/tmp/torus_auth_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/token";
  auto first = LoadOrCreateTokenFile(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 64u);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto second = LoadOrCreateTokenFile(path);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  auto other = GenerateToken();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
  std::filesystem::remove_all(tmpl);
}

TEST(AuthTest, MissingTokenFileIsNotFound) {
  auto t = ReadTokenFile("/nonexistent/torus/token");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace auth_test
}  // namespace torus::rpc
