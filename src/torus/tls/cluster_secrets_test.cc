#include "torus/tls/cluster_secrets.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "torus/tls/pki.h"

namespace torus::tls {
namespace {

std::string TempDir() {
  std::string pattern = ::testing::TempDir() + "cluster_secrets_XXXXXX";
  return mkdtemp(pattern.data());
}

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(ClusterSecretsTest, WritesACaThatVerifiesItselfAKeyOnlyTheOwnerReadsAndAJoinToken) {
  const std::string dir = TempDir() + "/tls";
  const int64_t now = time(nullptr);
  auto files = WriteClusterSecrets(dir, now);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->ca_cert, dir + "/ca.crt");
  EXPECT_EQ(Mode(dir), 0700);
  EXPECT_EQ(Mode(files->ca_key), 0600);
  EXPECT_EQ(Mode(files->ca_cert), 0644);
  EXPECT_EQ(Mode(files->join_token), 0600);
  auto cert = ReadWholeFile(files->ca_cert);
  auto key = ReadWholeFile(files->ca_key);
  ASSERT_TRUE(cert.ok() && key.ok());
  EXPECT_TRUE(VerifyCertificate(*cert, *cert, now).ok());
  EXPECT_TRUE(CheckKeyMatches(*key, *cert).ok());
  auto info = ReadCertificate(*cert);
  ASSERT_TRUE(info.ok());
  EXPECT_GE(info->not_after_s, now + int64_t{10} * 365 * 86'400 - 3600);
  auto token = ReadJoinToken(files->join_token);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->size(), 5u + 40u);
  EXPECT_EQ(token->rfind("join-", 0), 0u);
}

TEST(ClusterSecretsTest, NeverReplacesAnExistingCa) {
  const std::string dir = TempDir();
  ASSERT_TRUE(WriteClusterSecrets(dir, time(nullptr)).ok());
  auto before = ReadWholeFile(dir + "/ca.key");
  auto again = WriteClusterSecrets(dir, time(nullptr));
  ASSERT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), dir + "/ca.crt exists; remove it to make a new CA and join token");
  EXPECT_EQ(*ReadWholeFile(dir + "/ca.key"), *before);
}

TEST(ClusterSecretsTest, JoinTokensDifferAndAreReadFromTheFirstLineTrimmed) {
  auto a = NewJoinToken();
  auto b = NewJoinToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  const std::string path = TempDir() + "/join_token";
  std::ofstream(path) << "  " << *a << " \r\nsecond line\n";
  EXPECT_EQ(*ReadJoinToken(path), *a);
}

TEST(ClusterSecretsTest, AnEmptyOrShortOrMissingJoinTokenFileIsNamed) {
  const std::string path = TempDir() + "/join_token";
  std::ofstream(path) << "\n";
  auto empty = ReadJoinToken(path);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(),
            path + ": a join token is one line of at least 16 characters (`torus tls init` writes one)");
  std::ofstream(path) << "short\n";
  EXPECT_EQ(ReadJoinToken(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJoinToken(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace torus::tls
