#include "torus/tls/pki.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <ctime>

namespace torus::tls {
namespace pki_test {

int64_t Now() { return static_cast<int64_t>(time(nullptr)); }

struct Issued {
  KeyAndCertificate ca;
  std::string key;
  std::string cert;
};

Issued IssueNode(const std::string& node_id, int64_t validity_s = 3600) {
  Issued out;
  auto ca = CreateAuthority("torus cluster CA", Now(), 86'400);
  EXPECT_TRUE(ca.ok()) << ca.status();
  out.ca = *ca;
  auto key = GeneratePrivateKey();
  EXPECT_TRUE(key.ok()) << key.status();
  out.key = *key;
  auto csr = CreateSigningRequest(out.key, "whatever the node asked for");
  EXPECT_TRUE(csr.ok()) << csr.status();
  auto cert = IssueCertificate(out.ca, *csr,
                               {.common_name = NodeIdentity(node_id),
                                .dns_names = {"localhost"},
                                .ip_addresses = {"127.0.0.1", "::1"},
                                .now_s = Now(),
                                .validity_s = validity_s});
  EXPECT_TRUE(cert.ok()) << cert.status();
  out.cert = cert.ok() ? *cert : "";
  return out;
}

TEST(PkiTest, IssuedCertificateStatesTheIdentityGivenNotTheOneRequested) {
  Issued issued = IssueNode("host-7");
  auto info = ReadCertificate(issued.cert);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->common_name, "torus-node:host-7");
  EXPECT_EQ(info->issuer_common_name, "torus cluster CA");
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"localhost"});
  EXPECT_EQ(info->ip_addresses, (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_EQ(info->serial_hex.size(), 32u);
  EXPECT_NEAR(info->not_after_s - info->not_before_s, 3600 + 300, 2);
  EXPECT_TRUE(CheckKeyMatches(issued.key, issued.cert).ok());
  EXPECT_TRUE(VerifyCertificate(issued.ca.cert_pem, issued.cert, Now()).ok());
}

TEST(PkiTest, SerialsDiffer) {
  Issued a = IssueNode("a"), b = IssueNode("a");
  EXPECT_NE(ReadCertificate(a.cert)->serial_hex, ReadCertificate(b.cert)->serial_hex);
}

TEST(PkiTest, CertificateOfAnotherAuthorityDoesNotVerify) {
  Issued a = IssueNode("a"), b = IssueNode("b");
  absl::Status s = VerifyCertificate(a.ca.cert_pem, b.cert, Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("unable to get local issuer certificate"), std::string::npos) << s;
}

TEST(PkiTest, ExpiredCertificateDoesNotVerify) {
  Issued a = IssueNode("a", 60);
  absl::Status s = VerifyCertificate(a.ca.cert_pem, a.cert, Now() + 3600);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("expired"), std::string::npos) << s;
}

TEST(PkiTest, ForgedSigningRequestIsRefused) {
  Issued a = IssueNode("a");
  auto csr = CreateSigningRequest(a.key, "x");
  ASSERT_TRUE(csr.ok());
  // Flip one character of the base64 body near its end (inside the signature).
  std::string forged = *csr;
  const size_t end = forged.find("-----END");
  ASSERT_NE(end, std::string::npos);
  char& c = forged[end - 6];
  c = c == 'A' ? 'B' : 'A';
  auto cert = IssueCertificate(a.ca, forged, {.common_name = "torus-node:a", .now_s = Now()});
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PkiTest, BadInputsAreNamed) {
  Issued a = IssueNode("a");
  auto csr = CreateSigningRequest(a.key, "x");
  EXPECT_EQ(IssueCertificate(a.ca, "not pem", {.common_name = "n", .now_s = Now()}).status().message().substr(0, 41),
            "not a PEM certificate signing request: er");
  auto bad_ip = IssueCertificate(a.ca, *csr, {.common_name = "n", .ip_addresses = {"10.0.0.300"}, .now_s = Now()});
  EXPECT_EQ(bad_ip.status().message(), "'10.0.0.300' is not an IPv4 or IPv6 address");
  auto bad_dns = IssueCertificate(a.ca, *csr, {.common_name = "n", .dns_names = {"a,b"}, .now_s = Now()});
  EXPECT_EQ(bad_dns.status().message(), "'a,b' is not a DNS name");
  KeyAndCertificate mismatched{.key_pem = a.key, .cert_pem = a.ca.cert_pem};
  EXPECT_EQ(IssueCertificate(mismatched, *csr, {.common_name = "n", .now_s = Now()}).status().message(),
            "the CA key is not the key of the CA certificate");
  EXPECT_EQ(CreateSigningRequest(a.key, std::string(65, 'x')).status().message(),
            "common name must be 1-64 characters (got 65)");
  EXPECT_FALSE(ReadCertificate("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").ok());
}

TEST(PkiTest, NodeIdentityRoundTrips) {
  EXPECT_EQ(NodeIdentity("h1"), "torus-node:h1");
  EXPECT_EQ(NodeIdOfIdentity("torus-node:h1"), "h1");
  EXPECT_EQ(NodeIdOfIdentity("torus-node:"), "");
  EXPECT_EQ(NodeIdOfIdentity("torus-head"), "");
}

TEST(PkiTest, PrivateFileIsWrittenWithItsMode) {
  char tmpl[] = "/tmp/torus_pki_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/key.pem";
  ASSERT_TRUE(WritePrivateFile(path, "secret", 0600).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(*ReadWholeFile(path), "secret");
  EXPECT_EQ(ReadWholeFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

}  // namespace pki_test
}  // namespace torus::tls
