// Borrows: the distributed part of reference counting. An object lives in its owner (the process that put it, or
// submitted the task returning it) for as long as some process holds a ref to it. A process that gets a ref to an
// object another process owns — inside a task's arguments, a return value, or a value it read — registers with the
// owner as a borrower before it uses it (Register, waiting for the owner's answer), while whoever handed it the ref
// still holds it (a submitter holds the refs inside a task's arguments until the task ends; an owned value holds the
// refs inside it; a worker registers its caller for the refs in a task's returns before it answers). When it lets go
// (its last handle, and every value of its own containing it), the owner is told (Release: queued and sent by a
// thread of the tracker's own; a later Register to that owner sends what is queued first, so an owner sees one
// borrower's changes in order).
//
// As an owner, it applies its borrowers' changes (Handle) and asks each borrower every `probe_period` whether it is
// there: one that failed two probes in a row exited without saying so (killed), and is forgotten — what only it held
// is freed.
//
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/core.grpc.pb.h"
#include "torus/core/channels.h"
#include "torus/core/object_table.h"

namespace torus::core {

class Borrows {
 public:
  // `self`: this process's core worker address (the borrower it registers as).
  Borrows(Channels* channels, ObjectTable* table, std::string self, std::chrono::milliseconds probe_period);
  ~Borrows();  // Flush(1 s), then stops

  // Tells `owner` that `borrower` (this process when empty) holds `ids`, after what is queued for that owner; waits
  // for the answer. Returns the ids the owner no longer holds (freed), or every id when it cannot be reached.
  std::vector<std::string> Register(const std::string& owner, const std::vector<std::string>& ids,
                                    const std::string& borrower = "");
  // Queues: this process let go of borrowed `id` of `owner`.
  void Release(const std::string& owner, const std::string& id);
  // Waits up to `max_wait` for what is queued to be sent.
  void Flush(std::chrono::milliseconds max_wait);

  // The owner's side of UpdateBorrowers.
  void Handle(const UpdateBorrowersRequest& request, UpdateBorrowersReply* reply);

 private:
  absl::Mutex& OwnerLock(const std::string& owner);
  // Sends the releases queued for `owner` (under its lock).
  void SendReleases(const std::string& owner);
  grpc::Status Send(const std::string& owner, const UpdateBorrowersRequest& request, UpdateBorrowersReply* reply,
                    std::chrono::milliseconds deadline);
  void ProbeBorrowers();
  void Loop();

  Channels* channels_;
  ObjectTable* table_;
  const std::string self_;
  const std::chrono::milliseconds probe_period_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::string, std::set<std::string>> releases_ ABSL_GUARDED_BY(mu_);  // owner -> ids
  std::map<std::string, std::unique_ptr<absl::Mutex>> owner_locks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> probe_failures_;  // borrower -> failed probes in a row (loop)
  int sending_ ABSL_GUARDED_BY(mu_) = 0;       // owners being sent to
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torus::core
