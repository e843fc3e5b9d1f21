#include "torus/tls/credentials.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <thread>

#include "torus/node.grpc.pb.h"
#include "torus/tls/pki.h"

namespace torus::tls {
namespace credentials_test {

int64_t Now() { return static_cast<int64_t>(time(nullptr)); }

// Answers FreePort with the caller's verified identity in the trailing metadata "peer-identity".
class EchoIdentity final : public rpc::NodeService::CallbackService {
  grpc::ServerUnaryReactor* FreePort(grpc::CallbackServerContext* ctx, const rpc::FreePortRequest*,
                                     rpc::FreePortReply*) override {
    ctx->AddTrailingMetadata("peer-identity", PeerIdentity(ctx));
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/torus_credentials_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto ca = CreateAuthority("test CA", Now(), 86'400);
    ASSERT_TRUE(ca.ok());
    ca_ = *ca;
    ASSERT_TRUE(WritePrivateFile(dir_ + "/ca.crt", ca_.cert_pem, 0644).ok());
    server_ = Identity("server", "torus-node:s1", ca_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", ServerCredentials(server_), &port_);
    builder.RegisterService(&service_);
    server_handle_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    server_handle_->Shutdown();
    std::system(("rm -rf " + dir_).c_str());
  }

  // Files of a key and a certificate for `identity` issued by `ca`.
  TlsFiles Identity(const std::string& name, const std::string& identity, const KeyAndCertificate& ca) {
    auto key = GeneratePrivateKey();
    auto cert = IssueCertificate(ca, *CreateSigningRequest(*key, identity), {.common_name = identity, .now_s = Now()});
    EXPECT_TRUE(cert.ok()) << cert.status();
    TlsFiles files{.ca = dir_ + "/ca.crt", .cert = dir_ + "/" + name + ".crt", .key = dir_ + "/" + name + ".key"};
    EXPECT_TRUE(WritePrivateFile(files.key, *key, 0600).ok());
    EXPECT_TRUE(WritePrivateFile(files.cert, *cert, 0644).ok());
    return files;
  }

  // Calls the server; the status, and the identity it saw.
  std::pair<grpc::Status, std::string> Call(const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    auto stub = rpc::NodeService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rpc::FreePortRequest request;
    rpc::FreePortReply reply;
    grpc::Status s = stub->FreePort(&ctx, request, &reply);
    auto seen = ctx.GetServerTrailingMetadata().find("peer-identity");
    return {s, seen == ctx.GetServerTrailingMetadata().end() ? "(none)"
                                                              : std::string(seen->second.data(), seen->second.size())};
  }

  std::string dir_;
  KeyAndCertificate ca_;
  TlsFiles server_;
  EchoIdentity service_;
  std::unique_ptr<grpc::Server> server_handle_;
  int port_ = 0;
};

TEST_F(CredentialsTest, ClientWithACertificateIsKnownByItsIdentity) {
  TlsFiles client = Identity("head", kHeadIdentity, ca_);
  auto [status, seen] = Call(ChannelCredentials(client, "torus-node:s1"));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(seen, "torus-head");
}

TEST_F(CredentialsTest, ClientWithoutACertificateHasNoIdentity) {
  auto [status, seen] = Call(ChannelCredentials({.ca = dir_ + "/ca.crt"}, "torus-node:s1"));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(seen, "");
}

TEST_F(CredentialsTest, AnIdentityPrefixAcceptsAnyNode) {
  auto [status, seen] = Call(ChannelCredentials({.ca = dir_ + "/ca.crt"}, "torus-node:"));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(CredentialsTest, ServerWithAnotherIdentityIsRefused) {
  auto [status, seen] = Call(ChannelCredentials({.ca = dir_ + "/ca.crt"}, "torus-node:s2"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(seen, "(none)");
  auto [head_status, unused] = Call(ChannelCredentials({.ca = dir_ + "/ca.crt"}, kHeadIdentity));
  EXPECT_EQ(head_status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CredentialsTest, ServerOfAnotherAuthorityIsRefused) {
  auto other = CreateAuthority("other CA", Now(), 86'400);
  ASSERT_TRUE(WritePrivateFile(dir_ + "/other.crt", other->cert_pem, 0644).ok());
  auto [status, seen] = Call(ChannelCredentials({.ca = dir_ + "/other.crt"}, "torus-node:s1"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CredentialsTest, ClientCertificateOfAnotherAuthorityIsRefused) {
  auto other = CreateAuthority("other CA", Now(), 86'400);
  TlsFiles forged = Identity("forged", kHeadIdentity, *other);
  forged.ca = dir_ + "/ca.crt";  // it trusts the server, but its own certificate is not the cluster's
  auto [status, seen] = Call(ChannelCredentials(forged, "torus-node:s1"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(seen, "(none)");
}

TEST_F(CredentialsTest, ARenewedServerCertificateIsServedWithoutARestart) {
  // A server watching its files every second; its certificate is then replaced by one for another identity.
  TlsFiles files = Identity("renewed", "torus-node:before", ca_);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ServerCredentials(files, /*refresh_s=*/1), &port);
  EchoIdentity service;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto call = [&](const std::string& expected) {
    auto stub = rpc::NodeService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), ChannelCredentials({.ca = dir_ + "/ca.crt"}, expected)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rpc::FreePortReply reply;
    return stub->FreePort(&ctx, rpc::FreePortRequest(), &reply);
  };
  ASSERT_TRUE(call("torus-node:before").ok());
  const TlsFiles next = Identity("next", "torus-node:after", ca_);
  // The key first, then the certificate, as a renewal with a new key would write them.
  ASSERT_TRUE(WritePrivateFile(files.key, *ReadWholeFile(next.key), 0600).ok());
  ASSERT_TRUE(WritePrivateFile(files.cert, *ReadWholeFile(next.cert), 0644).ok());
  bool renewed = false;
  for (int i = 0; i < 50 && !renewed; ++i) {
    renewed = call("torus-node:after").ok();
    if (!renewed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(renewed);
  EXPECT_FALSE(call("torus-node:before").ok());
  server->Shutdown();
}

TEST_F(CredentialsTest, PlaintextClientIsRefused) {
  auto [status, seen] = Call(grpc::InsecureChannelCredentials());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace credentials_test
}  // namespace torus::tls
