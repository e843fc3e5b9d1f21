#include "torus/core/worker_certificate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "torus/head.grpc.pb.h"
#include "torus/tls/pki.h"

namespace torus::core {
namespace {

// A file in memory holding `contents` (memfd: gone with the process, never on disk); its descriptor, or -1.
int MemoryFile(const char* name, std::string_view contents) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    written += static_cast<size_t>(n);
  }
  return fd;
}

std::string PathOf(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerCertificate>> WorkerCertificate::Obtain(Channels* channels,
                                                                            const std::string& head_address,
                                                                            const std::string& ca_file) {
  auto ca = tls::ReadWholeFile(ca_file);
  if (!ca.ok()) return absl::InvalidArgumentError(absl::StrCat("TORUS_TLS_CA: ", ca.status().message()));
  std::unique_ptr<WorkerCertificate> cert(new WorkerCertificate(channels, head_address));
  auto key = tls::GeneratePrivateKey();
  if (!key.ok()) return key.status();
  cert->key_pem_ = *std::move(key);
  cert->ca_fd_ = MemoryFile("torus-ca", *ca);
  cert->key_fd_ = MemoryFile("torus-worker-key", cert->key_pem_);
  if (cert->ca_fd_ < 0 || cert->key_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot keep this process's key in memory (memfd): ", strerror(errno)));
  }
  if (absl::Status s = cert->Renew(); !s.ok()) return s;
  return cert;
}

WorkerCertificate::~WorkerCertificate() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (renewer_.joinable()) renewer_.join();
  for (int fd : {ca_fd_, key_fd_, cert_fd_}) {
    if (fd >= 0) close(fd);
  }
}

tls::TlsFiles WorkerCertificate::files() const {
  absl::MutexLock lock(&mu_);
  return {.ca = PathOf(ca_fd_), .cert = PathOf(cert_fd_), .key = PathOf(key_fd_)};
}

absl::Status WorkerCertificate::Renew() {
  auto csr = tls::CreateSigningRequest(key_pem_, "torus-worker");
  if (!csr.ok()) return csr.status();
  rpc::IssueWorkerCertificateRequest request;
  request.set_csr_pem(*csr);
  rpc::NodeCertificateReply reply;
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  // A head that is failing over (HA: the standby takes the lease within seconds) is waited for, not failed on.
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = rpc::NodeAdmissionService::NewStub(channels_->Head(head_address_));
  const grpc::Status s = stub->IssueWorkerCertificate(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("a certificate for this process's port from the head at ", head_address_, ": ",
                                     s.error_message()));
  }
  auto info = tls::ReadCertificate(reply.cert_pem());
  if (!info.ok()) return info.status();
  // A new memory file for the certificate, put in the old one's place at once (dup2): a reader of the path sees the
  // old certificate or the new one, never half of one; the key stays the same.
  const int fd = MemoryFile("torus-worker-cert", reply.cert_pem());
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot keep this process's certificate in memory: ",
                                                      strerror(errno)));
  absl::MutexLock lock(&mu_);
  if (cert_fd_ < 0) {
    cert_fd_ = fd;
  } else {
    dup2(fd, cert_fd_);
    close(fd);
  }
  identity_ = info->common_name;
  not_before_s_ = info->not_before_s;
  not_after_s_ = info->not_after_s;
  return absl::OkStatus();
}

std::string WorkerCertificate::identity() const {
  absl::MutexLock lock(&mu_);
  return identity_;
}

bool WorkerCertificate::Due() const {
  absl::MutexLock lock(&mu_);
  return time(nullptr) >= not_before_s_ + (not_after_s_ - not_before_s_) * 2 / 3;
}

void WorkerCertificate::StartRenewal(int64_t check_ms) {
  renewer_ = std::thread([this, check_ms] {
    mu_.Lock();
    while (true) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(check_ms);
      while (!stopping_) {
        if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
      }
      if (stopping_) break;
      mu_.Unlock();
      if (Due()) {
        if (absl::Status s = Renew(); !s.ok()) {
          std::cerr << "torus: renewing this process's certificate (retried in " << check_ms
                    << " ms): " << s.message() << std::endl;
        }
      }
      mu_.Lock();
    }
    mu_.Unlock();
  });
}

}  // namespace torus::core
