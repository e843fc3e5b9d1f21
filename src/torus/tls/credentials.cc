#include "torus/tls/credentials.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "torus/tls/pki.h"

namespace torus::tls {
namespace {

// Accepts a server whose verified certificate states the expected identity (gRPC has checked the chain first).
class IdentityVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit IdentityVerifier(std::string expected) : expected_(std::move(expected)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request, std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    const grpc::string_ref name = request->common_name();
    const std::string common_name(name.data(), name.size());
    if (expected_.empty()) {  // any member of the cluster (gRPC has checked the chain to its CA)
      *sync_status = grpc::Status::OK;
      return true;
    }
    const bool prefix = expected_.back() == ':';
    const bool ok = prefix ? common_name.size() > expected_.size() && common_name.compare(0, expected_.size(), expected_) == 0
                           : common_name == expected_;
    *sync_status = ok ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                     absl::StrCat("the server's certificate is for '", common_name, "', not '",
                                                  expected_, prefix ? "...'" : "'"));
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string expected_;
};

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(const TlsFiles& files,
                                                                          unsigned int refresh_s) {
  if (files.cert.empty()) {
    return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.ca, refresh_s);
  }
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.key, files.cert, files.ca,
                                                                             refresh_s);
}

}  // namespace

void NameMembersByIdentity(grpc::ChannelArguments* args) {
  args->SetSslTargetNameOverride(kMemberServerName);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files, unsigned int refresh_s) {
  grpc::experimental::TlsServerCredentialsOptions options(Provider(files, refresh_s));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files, const std::string& expected_identity,
                                                             unsigned int refresh_s) {
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(files, refresh_s));
  options.watch_root_certs();
  if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_check_call_host(false);
  options.set_certificate_verifier(
      grpc::experimental::ExternalCertificateVerifier::Create<IdentityVerifier>(expected_identity));
  return grpc::experimental::TlsCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromPem(const std::string& ca_pem,
                                                                    const std::string& cert_pem,
                                                                    const std::string& key_pem,
                                                                    const std::string& expected_identity) {
  std::vector<grpc::experimental::IdentityKeyCertPair> pairs;
  if (!cert_pem.empty()) pairs.push_back({.private_key = key_pem, .certificate_chain = cert_pem});
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(
      std::make_shared<grpc::experimental::StaticDataCertificateProvider>(ca_pem, pairs));
  options.watch_root_certs();
  if (!cert_pem.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_check_call_host(false);
  options.set_certificate_verifier(
      grpc::experimental::ExternalCertificateVerifier::Create<IdentityVerifier>(expected_identity));
  return grpc::experimental::TlsCredentials(options);
}

std::string PeerIdentity(const grpc::ServerContextBase* ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return "";
  std::vector<grpc::string_ref> names = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (names.empty()) return "";
  return std::string(names.front().data(), names.front().size());
}

}  // namespace torus::tls
