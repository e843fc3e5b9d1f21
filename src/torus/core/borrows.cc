#include "torus/core/borrows.h"

#include "torus/core/ids.h"

namespace torus::core {

Borrows::Borrows(Channels* channels, ObjectTable* table, std::string self, std::chrono::milliseconds probe_period)
    : channels_(channels), table_(table), self_(std::move(self)), probe_period_(probe_period) {
  thread_ = std::thread([this] { Loop(); });
}

Borrows::~Borrows() {
  Flush(std::chrono::seconds(1));
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

absl::Mutex& Borrows::OwnerLock(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto& m = owner_locks_[owner];
  if (!m) m = std::make_unique<absl::Mutex>();
  return *m;
}

grpc::Status Borrows::Send(const std::string& owner, const UpdateBorrowersRequest& request,
                           UpdateBorrowersReply* reply, std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return channels_->Worker(owner)->UpdateBorrowers(&ctx, request, reply);
}

std::vector<std::string> Borrows::Register(const std::string& owner, const std::vector<std::string>& ids,
                                           const std::string& borrower) {
  absl::MutexLock owner_lock(&OwnerLock(owner));
  UpdateBorrowersRequest request;
  request.set_borrower(borrower.empty() ? self_ : borrower);
  if (borrower.empty()) {
    absl::MutexLock lock(&mu_);
    if (auto it = releases_.find(owner); it != releases_.end()) {
      // Let go and held again: the owner keeps counting this process.
      for (const std::string& id : ids) it->second.erase(id);
      for (const std::string& id : it->second) request.add_remove(id);
      releases_.erase(it);
    }
  }
  for (const std::string& id : ids) request.add_add(id);
  UpdateBorrowersReply reply;
  if (!Send(owner, request, &reply, std::chrono::seconds(10)).ok()) return ids;
  return {reply.unknown().begin(), reply.unknown().end()};
}

void Borrows::Release(const std::string& owner, const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    releases_[owner].insert(id);
  }
  cv_.SignalAll();
}

void Borrows::SendReleases(const std::string& owner) {
  absl::MutexLock owner_lock(&OwnerLock(owner));
  UpdateBorrowersRequest request;
  request.set_borrower(self_);
  {
    absl::MutexLock lock(&mu_);
    auto it = releases_.find(owner);
    if (it == releases_.end()) return;
    for (const std::string& id : it->second) request.add_remove(id);
    releases_.erase(it);
  }
  UpdateBorrowersReply reply;
  Send(owner, request, &reply, std::chrono::seconds(5)).ok();  // an owner gone has freed them already
}

void Borrows::Flush(std::chrono::milliseconds max_wait) {
  absl::MutexLock lock(&mu_);
  cv_.SignalAll();
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  while (!(releases_.empty() && sending_ == 0)) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
}

void Borrows::Handle(const UpdateBorrowersRequest& request, UpdateBorrowersReply* reply) {
  if (request.borrower().empty()) return;
  for (const std::string& id : request.remove()) table_->RemoveBorrower(id, request.borrower());
  for (const std::string& id : request.add()) {
    if (!table_->AddBorrower(id, request.borrower())) reply->add_unknown(id);
  }
}

void Borrows::ProbeBorrowers() {
  for (const std::string& borrower : table_->Borrowers()) {
    UpdateBorrowersReply ignored;
    grpc::Status s = Send(borrower, UpdateBorrowersRequest(), &ignored, std::chrono::seconds(2));
    if (s.ok() || (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
                   s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)) {
      probe_failures_.erase(borrower);
    } else if (++probe_failures_[borrower] >= 2) {
      probe_failures_.erase(borrower);
      table_->DropBorrower(borrower);
    }
  }
}

void Borrows::Loop() {
  auto next_probe = std::chrono::steady_clock::now() + probe_period_;
  mu_.Lock();
  while (!stop_) {
    while (!(stop_ || !releases_.empty())) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(next_probe - std::chrono::steady_clock::now()))) break;
    }
    if (stop_) break;
    std::vector<std::string> owners;
    for (const auto& [owner, ids] : releases_) owners.push_back(owner);
    ++sending_;
    mu_.Unlock();
    for (const std::string& owner : owners) SendReleases(owner);
    if (std::chrono::steady_clock::now() >= next_probe) {
      ProbeBorrowers();
      next_probe = std::chrono::steady_clock::now() + probe_period_;
    }
    mu_.Lock();
    --sending_;
    cv_.SignalAll();
  }
  mu_.Unlock();
}

}  // namespace torus::core
