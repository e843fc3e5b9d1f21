// WorkerCertificate: the certificate a core worker serves its port with in a cluster with TLS (task and actor calls,
// object ownership and borrows). The core worker asks the head for it with the cluster token
// (NodeAdmissionService.IssueWorkerCertificate; identity "torus-worker:<random id>", which grants nothing the token
// does not) and asks again once two thirds of its life have passed. An agent's node key is never given to the
// processes it starts.
//
// The key, the certificate and the CA live in memory files (memfd), never on disk, and go with the process however
// it ends; files() names them as /proc/self/fd/N. A server built from files() watches them and takes a renewed
// certificate up.
//
// Thread-safety: Obtain on one thread; the renewal thread runs on its own until destruction.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/core/channels.h"
#include "torus/tls/credentials.h"

namespace torus::core {

class WorkerCertificate {
 public:
  // A certificate from the head at `head_address` (through `channels`, over TLS checked against `ca_file`).
  // UNAVAILABLE when the head cannot be reached; the head's error otherwise (UNAUTHENTICATED for a wrong token).
  static absl::StatusOr<std::unique_ptr<WorkerCertificate>> Obtain(Channels* channels, const std::string& head_address,
                                                                   const std::string& ca_file);
  ~WorkerCertificate();  // stops renewing and closes the memory files

  tls::TlsFiles files() const;
  std::string identity() const;
  // Asks for a new certificate now (the renewal thread's step); the files are rewritten in place.
  absl::Status Renew();
  // Renews at two thirds of the current certificate's life, checking every `check_ms`.
  void StartRenewal(int64_t check_ms = 30'000);

 private:
  WorkerCertificate(Channels* channels, std::string head_address)
      : channels_(channels), head_address_(std::move(head_address)) {}
  bool Due() const;

  Channels* const channels_;
  const std::string head_address_;
  std::string key_pem_;
  std::string identity_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  int ca_fd_ = -1;                         // set by Obtain
  int key_fd_ = -1;                        // set by Obtain
  int cert_fd_ ABSL_GUARDED_BY(mu_) = -1;  // its file is replaced in place by Renew
  int64_t not_before_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t not_after_s_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace torus::core
