#include "torus/head/admission/cluster_authority.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "torus/tls/cluster_secrets.h"

namespace torus::head {
namespace cluster_authority_test {

class ClusterAuthorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/torus_authority_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }

  std::unique_ptr<ClusterAuthority> Open(AuthorityOptions options = {}) {
    if (options.dir.empty()) options.dir = root_ + "/tls";
    auto opened = ClusterAuthority::Open(options, &clock_);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }
  int64_t Now() const { return clock_.WallMillis() / 1000; }
  std::string Csr() {
    return *tls::CreateSigningRequest(*tls::GeneratePrivateKey(), "anything");
  }
  std::string JoinToken(const ClusterAuthority& a) {
    auto text = tls::ReadWholeFile(a.join_token_path());
    return text->substr(0, text->find('\n'));
  }

  std::string root_;
  FakeClock clock_;
};

TEST_F(ClusterAuthorityTest, FirstStartCreatesTheCaTheHeadCertificateAndAJoinToken) {
  auto a = Open({.head_hosts = {"10.1.2.3", "head.example.com", "0.0.0.0"}});
  ASSERT_NE(a, nullptr);
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/tls/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(stat((root_ + "/tls/join_token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto head = tls::ReadCertificate(*tls::ReadWholeFile(a->head_files().cert));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->common_name, "torus-head");
  EXPECT_EQ(head->dns_names, (std::vector<std::string>{"localhost", "torus-member", "head.example.com"}));
  EXPECT_EQ(head->ip_addresses, (std::vector<std::string>{"127.0.0.1", "10.1.2.3"}));
  EXPECT_TRUE(tls::VerifyCertificate(a->ca_pem(), *tls::ReadWholeFile(a->head_files().cert), Now()).ok());
  EXPECT_EQ(JoinToken(*a).substr(0, 5), "join-");
  EXPECT_EQ(JoinToken(*a).size(), 45u);
}

TEST_F(ClusterAuthorityTest, ARestartKeepsTheCaAndTheJoinToken) {
  auto first = Open();
  const std::string ca = first->ca_pem(), token = JoinToken(*first);
  first.reset();
  auto second = Open();
  EXPECT_EQ(second->ca_pem(), ca);
  EXPECT_EQ(JoinToken(*second), token);
  EXPECT_TRUE(second->IssueForJoin(token, "h1", Csr()).ok());
}

TEST_F(ClusterAuthorityTest, JoinTokenBuysANodeCertificateForTheNodeNamed) {
  auto a = Open({.node_validity_s = 600});
  auto issued = a->IssueForJoin(JoinToken(*a), "host-1", Csr());
  ASSERT_TRUE(issued.ok()) << issued.status();
  auto info = tls::ReadCertificate(issued->cert_pem);
  EXPECT_EQ(info->common_name, "torus-node:host-1");
  EXPECT_EQ(issued->not_after_s, Now() + 600);
  EXPECT_EQ(issued->ca_pem, a->ca_pem());
  EXPECT_TRUE(tls::VerifyCertificate(a->ca_pem(), issued->cert_pem, Now()).ok());
  // No address or host a caller could choose: only the name torus's channels to members ask for.
  EXPECT_TRUE(info->ip_addresses.empty());
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"torus-member"});
  auto renewed = tls::ReadCertificate(a->IssueForNode("host-1", Csr())->cert_pem);
  EXPECT_TRUE(renewed->ip_addresses.empty());
  EXPECT_EQ(renewed->dns_names, std::vector<std::string>{"torus-member"});
  auto worker = tls::ReadCertificate(a->IssueForWorker(Csr())->cert_pem);
  EXPECT_EQ(worker->common_name.rfind("torus-worker:", 0), 0u);
  EXPECT_TRUE(worker->ip_addresses.empty());
  EXPECT_EQ(worker->dns_names, std::vector<std::string>{"torus-member"});
}

TEST_F(ClusterAuthorityTest, WrongExpiredOrRotatedJoinTokensAreRefused) {
  auto a = Open({.join_token_ttl_s = 3600});
  const std::string token = JoinToken(*a);
  auto wrong = a->IssueForJoin("join-0000", "h1", Csr());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong.status().message(), "join_token: not this cluster's join token");
  EXPECT_EQ(a->IssueForJoin("", "h1", Csr()).status().code(), absl::StatusCode::kPermissionDenied);
  clock_.AdvanceMillis(3600 * 1000);
  auto expired = a->IssueForJoin(token, "h1", Csr());
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(expired.status().message().find("expired"), absl::string_view::npos) << expired.status();
  auto rotated = a->RotateJoinToken();
  ASSERT_TRUE(rotated.ok());
  EXPECT_EQ(JoinToken(*a), *rotated);
  EXPECT_TRUE(a->IssueForJoin(*rotated, "h1", Csr()).ok());
  EXPECT_EQ(a->IssueForJoin(token, "h1", Csr()).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ClusterAuthorityTest, BadNodeIdsAndRequestsAreNamed) {
  auto a = Open();
  auto bad_id = a->IssueForJoin(JoinToken(*a), "a b", Csr());
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.status().message().find("node_id \"a b\" is invalid"), absl::string_view::npos);
  auto bad_csr = a->IssueForNode("h1", "garbage");
  EXPECT_EQ(bad_csr.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_csr.status().message().substr(0, 10), "csr_pem: n");
}

TEST_F(ClusterAuthorityTest, TheHeadCertificateIsRenewedAfterTwoThirdsOfItsLifeWithTheSameKey) {
  auto a = Open({.head_validity_s = 3000});
  const std::string key = *tls::ReadWholeFile(a->head_files().key);
  const std::string before = *tls::ReadWholeFile(a->head_files().cert);
  EXPECT_FALSE(*a->RenewHeadIfDue());
  clock_.AdvanceMillis(1000 * 1000);  // the certificate starts 5 min early: 3300 s of life, renewed from 1900 s
  EXPECT_FALSE(*a->RenewHeadIfDue());
  clock_.AdvanceMillis(950 * 1000);
  EXPECT_TRUE(*a->RenewHeadIfDue());
  const std::string after = *tls::ReadWholeFile(a->head_files().cert);
  EXPECT_NE(tls::ReadCertificate(after)->serial_hex, tls::ReadCertificate(before)->serial_hex);
  EXPECT_EQ(*tls::ReadWholeFile(a->head_files().key), key);
  EXPECT_TRUE(tls::CheckKeyMatches(key, after).ok());
  EXPECT_FALSE(*a->RenewHeadIfDue());
}

TEST_F(ClusterAuthorityTest, PublishCopiesTheCaAndThePrivateJoinTokenIntoASession) {
  auto a = Open();
  ASSERT_TRUE(a->Publish(root_).ok());
  EXPECT_EQ(*tls::ReadWholeFile(root_ + "/ca.crt"), a->ca_pem());
  EXPECT_EQ(*tls::ReadWholeFile(root_ + "/join_token"), *tls::ReadWholeFile(a->join_token_path()));
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/join_token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST_F(ClusterAuthorityTest, TheRenewalThreadRenewsTheHeadCertificateWhenDue) {
  auto a = Open({.head_validity_s = 3000});
  const std::string before = *tls::ReadWholeFile(a->head_files().cert);
  a->StartRenewal(std::chrono::milliseconds(10));
  clock_.AdvanceMillis(2500 * 1000);
  std::string after = before;
  for (int i = 0; i < 500 && after == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = *tls::ReadWholeFile(a->head_files().cert);
  }
  a->Stop();
  EXPECT_NE(tls::ReadCertificate(after)->serial_hex, tls::ReadCertificate(before)->serial_hex);
}

TEST_F(ClusterAuthorityTest, AGivenCaIsUsedAndItsKeyMustMatch) {
  auto ca = tls::CreateAuthority("company CA", Now(), 86'400);
  auto other = tls::CreateAuthority("other", Now(), 86'400);
  ASSERT_TRUE(tls::WritePrivateFile(root_ + "/ca.pem", ca->cert_pem, 0644).ok());
  ASSERT_TRUE(tls::WritePrivateFile(root_ + "/ca-key.pem", ca->key_pem, 0600).ok());
  ASSERT_TRUE(tls::WritePrivateFile(root_ + "/other-key.pem", other->key_pem, 0600).ok());
  auto a = Open({.ca_cert_file = root_ + "/ca.pem", .ca_key_file = root_ + "/ca-key.pem"});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ca_pem(), ca->cert_pem);
  EXPECT_EQ(*tls::ReadWholeFile(a->head_files().ca), ca->cert_pem);
  auto mismatched = ClusterAuthority::Open(
      {.dir = root_ + "/tls2", .ca_cert_file = root_ + "/ca.pem", .ca_key_file = root_ + "/other-key.pem"}, &clock_);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  auto half = ClusterAuthority::Open({.dir = root_ + "/tls3", .ca_cert_file = root_ + "/ca.pem"}, &clock_);
  EXPECT_EQ(half.status().message(), "--tls-ca and --tls-ca-key go together (the CA's certificate and its key)");
  auto missing = ClusterAuthority::Open(
      {.dir = root_ + "/tls4", .ca_cert_file = root_ + "/nope.pem", .ca_key_file = root_ + "/ca-key.pem"}, &clock_);
  EXPECT_EQ(missing.status().message(), root_ + "/nope.pem does not exist");
}

TEST_F(ClusterAuthorityTest, AGivenJoinTokenFileIsReadAtEachJoinNeverExpiresAndIsRotatedByRewritingIt) {
  auto secrets = tls::WriteClusterSecrets(root_ + "/secret", Now());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  auto a = Open({.ca_cert_file = secrets->ca_cert,
                 .ca_key_file = secrets->ca_key,
                 .join_token_ttl_s = 60,
                 .join_token_file = secrets->join_token});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->join_token_path(), secrets->join_token);
  const std::string first = *tls::ReadJoinToken(secrets->join_token);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/tls/join_token"));
  clock_.AdvanceMillis(int64_t{30} * 86'400'000);  // far past join_token_ttl_s: a given token does not expire
  auto issued = a->IssueForJoin(first, "n1", Csr());
  ASSERT_TRUE(issued.ok()) << issued.status();
  EXPECT_TRUE(tls::VerifyCertificate(*tls::ReadWholeFile(secrets->ca_cert), issued->cert_pem, Now()).ok());

  ASSERT_TRUE(tls::WritePrivateFile(secrets->join_token, "join-rotated-by-the-secret-owner\n", 0600).ok());
  EXPECT_EQ(a->IssueForJoin(first, "n2", Csr()).status().message(), "join_token: not this cluster's join token");
  EXPECT_TRUE(a->IssueForJoin("join-rotated-by-the-secret-owner", "n2", Csr()).ok());
  EXPECT_EQ(a->RotateJoinToken().status().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(a->Publish(root_).ok());
  EXPECT_EQ(*tls::ReadWholeFile(root_ + "/join_token"), "join-rotated-by-the-secret-owner\n");

  ASSERT_TRUE(tls::WritePrivateFile(secrets->join_token, "\n", 0600).ok());
  EXPECT_EQ(a->IssueForJoin("", "n3", Csr()).status().code(), absl::StatusCode::kUnavailable);
  auto refused = ClusterAuthority::Open({.dir = root_ + "/tls5", .join_token_file = secrets->join_token}, &clock_);
  EXPECT_EQ(refused.status().message(),
            secrets->join_token + ": a join token is one line of at least 16 characters (`torus tls init` writes one)");
}

}  // namespace cluster_authority_test
}  // namespace torus::head
