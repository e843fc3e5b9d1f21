#include "torus/node/node_certificate.h"

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/common/head_target.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/convert.h"
#include "torus/tls/pki.h"

namespace torus::node {

NodeCertificateKeeper::NodeCertificateKeeper(NodeCertificateOptions options, const Clock* clock)
    : options_(std::move(options)), clock_(clock) {}

NodeCertificateKeeper::~NodeCertificateKeeper() { Stop(); }

tls::TlsFiles NodeCertificateKeeper::files() const {
  return {.ca = options_.dir + "/ca.crt", .cert = options_.dir + "/node.crt", .key = options_.dir + "/node.key"};
}

int64_t NodeCertificateKeeper::not_after_s() const {
  absl::MutexLock lock(&mu_);
  return not_after_s_;
}

absl::StatusOr<std::unique_ptr<NodeCertificateKeeper>> NodeCertificateKeeper::Obtain(
    const NodeCertificateOptions& options, const Clock* clock, int64_t give_up_ms) {
  std::unique_ptr<NodeCertificateKeeper> keeper(new NodeCertificateKeeper(options, clock));
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", options.dir, ": ", ec.message()));
  auto ca = tls::ReadWholeFile(options.ca_file);
  if (!ca.ok()) return absl::InvalidArgumentError(absl::StrCat("--tls-ca: ", ca.status().message()));
  if (!tls::ReadCertificate(*ca).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-ca: ", options.ca_file, " is not a PEM certificate"));
  }
  const tls::TlsFiles files = keeper->files();
  if (absl::Status s = tls::WritePrivateFile(files.ca, *ca, 0644); !s.ok()) return s;
  const int64_t now_s = clock->WallMillis() / 1000;

  // A key of our own, kept across renewals and restarts.
  if (auto key = tls::ReadWholeFile(files.key); key.ok()) {
    keeper->key_pem_ = *std::move(key);
  } else {
    auto generated = tls::GeneratePrivateKey();
    if (!generated.ok()) return generated.status();
    keeper->key_pem_ = *std::move(generated);
    if (absl::Status s = tls::WritePrivateFile(files.key, keeper->key_pem_, 0600); !s.ok()) return s;
  }
  // The certificate we hold, when it is still good for us. One past two thirds of its life is used too (the renewal
  // thread renews it at once, with the certificate itself): the join token may have expired since.
  if (auto cert = tls::ReadWholeFile(files.cert); cert.ok()) {
    auto info = tls::ReadCertificate(*cert);
    const bool ours = info.ok() && info->common_name == tls::NodeIdentity(options.node_id) &&
                      tls::VerifyCertificate(*ca, *cert, now_s).ok() &&
                      tls::CheckKeyMatches(keeper->key_pem_, *cert).ok();
    if (ours) {
      absl::MutexLock lock(&keeper->mu_);
      keeper->not_before_s_ = info->not_before_s;
      keeper->not_after_s_ = info->not_after_s;
    }
  }
  if (keeper->not_after_s() == 0) {
    if (options.join_token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no valid certificate in ", options.dir, " and no join token: pass --join-token or --join-token-file"));
    }
    if (absl::Status s = keeper->Join(give_up_ms); !s.ok()) return s;
  }
  return keeper;
}

bool NodeCertificateKeeper::Due() const {
  absl::MutexLock lock(&mu_);
  const int64_t renew_at = not_before_s_ + (not_after_s_ - not_before_s_) * 2 / 3;
  return clock_->WallMillis() / 1000 >= renew_at;
}

absl::Status NodeCertificateKeeper::Store(const std::string& cert_pem) {
  auto info = tls::ReadCertificate(cert_pem);
  if (!info.ok()) return absl::InternalError(absl::StrCat("the head's certificate does not parse: ", info.status().message()));
  if (info->common_name != tls::NodeIdentity(options_.node_id) || !tls::CheckKeyMatches(key_pem_, cert_pem).ok()) {
    return absl::InternalError(absl::StrCat("the head issued a certificate for '", info->common_name,
                                            "' or another key; expected ", tls::NodeIdentity(options_.node_id)));
  }
  if (absl::Status s = tls::WritePrivateFile(files().cert, cert_pem, 0644); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  not_before_s_ = info->not_before_s;
  not_after_s_ = info->not_after_s;
  return absl::OkStatus();
}

absl::Status NodeCertificateKeeper::Join(int64_t give_up_ms) {
  auto csr = tls::CreateSigningRequest(key_pem_, tls::NodeIdentity(options_.node_id));
  if (!csr.ok()) return csr.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(HeadTarget(options_.head_address),
                                           tls::ChannelCredentials({.ca = files().ca}, tls::kHeadIdentity), args);
  auto stub = rpc::NodeAdmissionService::NewStub(channel);
  const int64_t deadline_us = clock_->NowMicros() + give_up_ms * 1000;
  int64_t backoff_ms = 100;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rpc::JoinClusterRequest request;
    request.set_join_token(options_.join_token);
    request.set_node_id(options_.node_id);
    request.set_csr_pem(*csr);
    rpc::NodeCertificateReply reply;
    grpc::Status s = stub->JoinCluster(&ctx, request, &reply);
    if (s.ok()) {
      spdlog::info("joined the cluster as {}: certificate valid until {}", tls::NodeIdentity(options_.node_id),
                   reply.not_after_unix());
      return Store(reply.cert_pem());
    }
    const bool retry = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                       s.error_code() == grpc::StatusCode::ALREADY_EXISTS;
    if (!retry || clock_->NowMicros() >= deadline_us) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("joining the cluster at ", options_.head_address, ": ", s.error_message()));
    }
    spdlog::warn("joining the cluster: {} (retrying in {} ms)", s.error_message(), backoff_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 2000);
  }
}

absl::Status NodeCertificateKeeper::RenewNow(const std::shared_ptr<grpc::Channel>& head) {
  auto csr = tls::CreateSigningRequest(key_pem_, tls::NodeIdentity(options_.node_id));
  if (!csr.ok()) return csr.status();
  auto stub = rpc::NodeAdmissionService::NewStub(head);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  rpc::RenewNodeCertificateRequest request;
  request.set_csr_pem(*csr);
  rpc::NodeCertificateReply reply;
  grpc::Status s = stub->RenewNodeCertificate(&ctx, request, &reply);
  if (!s.ok()) return rpc::FromGrpc(s);
  if (absl::Status stored = Store(reply.cert_pem()); !stored.ok()) return stored;
  spdlog::info("certificate renewed: valid until {}", reply.not_after_unix());
  return absl::OkStatus();
}

void NodeCertificateKeeper::StartRenewal(std::shared_ptr<grpc::Channel> head, int64_t check_ms) {
  renewer_ = std::thread([this, head = std::move(head), check_ms] {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      // First at once: a certificate kept from before a restart may be due already.
      mu_.Unlock();
      if (Due()) {
        if (absl::Status s = RenewNow(head); !s.ok()) {
          spdlog::warn("certificate renewal failed (retried in {} ms): {}", check_ms, std::string(s.message()));
        }
      }
      mu_.Lock();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(check_ms);
      while (!stopping_) {
        if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
      }
    }
  });
}

void NodeCertificateKeeper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (renewer_.joinable()) renewer_.join();
}

}  // namespace torus::node
