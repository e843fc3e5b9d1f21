#include "torus/tls/server_certificate.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "torus/tls/pki.h"

namespace torus::tls {
namespace server_certificate_test {

int64_t Now() { return static_cast<int64_t>(time(nullptr)); }

// One TLS handshake over a socket pair between a server context `server` and a client that trusts `ca_file`;
// returns the common name of the certificate the server presented ("" when the handshake failed).
std::string HandshakeCommonName(SSL_CTX* server, const std::string& ca_file) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return "";
  std::thread accept([&] {
    SSL* ssl = SSL_new(server);
    SSL_set_fd(ssl, fds[0]);
    SSL_accept(ssl);
    SSL_shutdown(ssl);
    SSL_free(ssl);
  });
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(client_ctx, ca_file.c_str(), nullptr);
  SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, nullptr);
  SSL* ssl = SSL_new(client_ctx);
  SSL_set_fd(ssl, fds[1]);
  std::string name;
  if (SSL_connect(ssl) == 1) {
    X509* peer = SSL_get1_peer_certificate(ssl);
    char buf[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, buf, sizeof(buf));
    name = buf;
    X509_free(peer);
  }
  SSL_free(ssl);
  SSL_CTX_free(client_ctx);
  close(fds[1]);
  accept.join();
  close(fds[0]);
  ERR_clear_error();
  return name;
}

class ServerCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The server's session tickets and close_notify may go to a client that already hung up.
    signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/torus_server_cert_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ca_ = *CreateAuthority("test CA", Now(), 86'400);
    ASSERT_TRUE(WritePrivateFile(dir_ + "/ca.crt", ca_.cert_pem, 0644).ok());
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  // Writes a key and a certificate for `name` as the server's files.
  void Issue(const std::string& name) {
    const std::string key = *GeneratePrivateKey();
    const std::string cert = *IssueCertificate(ca_, *CreateSigningRequest(key, name), {.common_name = name, .now_s = Now()});
    ASSERT_TRUE(WritePrivateFile(dir_ + "/server.key", key, 0600).ok());
    ASSERT_TRUE(WritePrivateFile(dir_ + "/server.crt", cert, 0644).ok());
  }
  TlsFiles Files() const { return {.ca = dir_ + "/ca.crt", .cert = dir_ + "/server.crt", .key = dir_ + "/server.key"}; }

  std::string dir_;
  KeyAndCertificate ca_;
};

TEST_F(ServerCertificateTest, ARenewedCertificateIsServedAtTheNextHandshakeAfterAtMostASecond) {
  Issue("torus-head");
  ServerCertificate certificate(Files());
  ASSERT_TRUE(certificate.Load().ok());
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_TRUE(certificate.Install(ctx));
  EXPECT_EQ(HandshakeCommonName(ctx, dir_ + "/ca.crt"), "torus-head");
  Issue("torus-head-renewed");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(HandshakeCommonName(ctx, dir_ + "/ca.crt"), "torus-head-renewed");
  SSL_CTX_free(ctx);
}

TEST_F(ServerCertificateTest, AKeyThatIsNotTheCertificatesKeepsThePreviousPair) {
  Issue("torus-head");
  ServerCertificate certificate(Files());
  ASSERT_TRUE(certificate.Load().ok());
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_TRUE(certificate.Install(ctx));
  // Half a renewal: a new key, the old certificate.
  ASSERT_TRUE(WritePrivateFile(dir_ + "/server.key", *GeneratePrivateKey(), 0600).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(HandshakeCommonName(ctx, dir_ + "/ca.crt"), "torus-head");
  SSL_CTX_free(ctx);
}

TEST_F(ServerCertificateTest, LoadNamesTheFileThatDoesNotLoad) {
  ServerCertificate missing(Files());
  EXPECT_EQ(missing.Load().message(), "cannot read " + dir_ + "/server.crt");
  Issue("torus-head");
  ASSERT_TRUE(WritePrivateFile(dir_ + "/server.key", *GeneratePrivateKey(), 0600).ok());
  ServerCertificate mismatched(Files());
  EXPECT_EQ(mismatched.Load().message(), dir_ + "/server.key is not the key of " + dir_ + "/server.crt");
}

}  // namespace server_certificate_test
}  // namespace torus::tls
