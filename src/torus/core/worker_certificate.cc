#include "torus/core/worker_certificate.h"

#include <stdlib.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "torus/head.grpc.pb.h"
#include "torus/tls/pki.h"

namespace torus::core {

absl::StatusOr<std::unique_ptr<WorkerCertificate>> WorkerCertificate::Obtain(Channels* channels,
                                                                            const std::string& head_address,
                                                                            const std::string& ca_file,
                                                                            std::string node_ip) {
  auto ca = tls::ReadWholeFile(ca_file);
  if (!ca.ok()) return absl::InvalidArgumentError(absl::StrCat("TORUS_TLS_CA: ", ca.status().message()));
  const char* tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp", "/torus-worker-tls-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a directory like ", pattern, ": ", strerror(errno)));
  }
  std::unique_ptr<WorkerCertificate> cert(new WorkerCertificate(channels, head_address, pattern, std::move(node_ip)));
  if (absl::Status s = tls::WritePrivateFile(cert->files().ca, *ca, 0644, /*durable=*/false); !s.ok()) return s;
  auto key = tls::GeneratePrivateKey();
  if (!key.ok()) return key.status();
  cert->key_pem_ = *std::move(key);
  if (absl::Status s = tls::WritePrivateFile(cert->files().key, cert->key_pem_, 0600, /*durable=*/false); !s.ok()) return s;
  if (absl::Status s = cert->Renew(); !s.ok()) return s;
  return cert;
}

WorkerCertificate::~WorkerCertificate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

tls::TlsFiles WorkerCertificate::files() const {
  return {.ca = dir_ + "/ca.crt", .cert = dir_ + "/worker.crt", .key = dir_ + "/worker.key"};
}

absl::Status WorkerCertificate::Renew() {
  auto csr = tls::CreateSigningRequest(key_pem_, "torus-worker");
  if (!csr.ok()) return csr.status();
  rpc::IssueWorkerCertificateRequest request;
  request.set_csr_pem(*csr);
  request.set_node_ip(node_ip_);
  rpc::NodeCertificateReply reply;
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  // A head that is failing over (HA: the standby takes the lease within seconds) is waited for, not failed on.
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = rpc::NodeAdmissionService::NewStub(channels_->Get(head_address_));
  const grpc::Status s = stub->IssueWorkerCertificate(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("a certificate for this process's port from the head at ", head_address_, ": ",
                                     s.error_message()));
  }
  auto info = tls::ReadCertificate(reply.cert_pem());
  if (!info.ok()) return info.status();
  if (absl::Status w = tls::WritePrivateFile(files().cert, reply.cert_pem(), 0644, /*durable=*/false); !w.ok()) return w;
  std::lock_guard<std::mutex> lock(mu_);
  identity_ = info->common_name;
  not_before_s_ = info->not_before_s;
  not_after_s_ = info->not_after_s;
  return absl::OkStatus();
}

std::string WorkerCertificate::identity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return identity_;
}

bool WorkerCertificate::Due() const {
  std::lock_guard<std::mutex> lock(mu_);
  return time(nullptr) >= not_before_s_ + (not_after_s_ - not_before_s_) * 2 / 3;
}

void WorkerCertificate::StartRenewal(int64_t check_ms) {
  renewer_ = std::thread([this, check_ms] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(check_ms), [this] { return stopping_; })) {
      lock.unlock();
      if (Due()) {
        if (absl::Status s = Renew(); !s.ok()) {
          std::cerr << "torus: renewing this process's certificate (retried in " << check_ms
                    << " ms): " << s.message() << std::endl;
        }
      }
      lock.lock();
    }
  });
}

}  // namespace torus::core
