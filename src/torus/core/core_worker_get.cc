// CoreWorker's reads: Get and Wait of objects this process owns (from its table) or borrows (fetched from their
// owners). In a task worker, a read that has to wait for an object not ready yet marks the worker blocked with its
// agent for as long as it waits (blocked_reporter.h), so that the agent lends the lease's CPU to the tasks it waits for.
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "torus/core/core_worker.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"

namespace torus::core {
namespace {

std::chrono::steady_clock::time_point ReadDeadline(int64_t timeout_ms) {
  if (timeout_ms < 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
}

// The worker is blocked from the first wait of a read until the read returns.
class LazyBlocked {
 public:
  explicit LazyBlocked(BlockedReporter* reporter) : reporter_(reporter) {}
  void Now() {
    if (!scope_) scope_.emplace(reporter_);
  }

 private:
  BlockedReporter* reporter_;
  std::optional<BlockedReporter::Scope> scope_;
};

}  // namespace

std::unique_ptr<BlockedReporter> CoreWorker::NewBlockedReporter() {
  if (options_.worker_id.empty()) return nullptr;  // a driver holds no lease
  return std::make_unique<BlockedReporter>([this](bool blocked) {
    grpc::ClientContext ctx;
    channels_.Authorize(ctx);
    // The agent is on this machine: a report that takes longer is not worth holding the next one (or an exit) for.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    WorkerBlockedRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_blocked(blocked);
    WorkerBlockedReply reply;
    // NOT_FOUND: between leases (a read outside a task); an agent that is gone takes its leases with it.
    channels_.Leases(options_.local_agent)->NotifyWorkerBlocked(&ctx, request, &reply);
  });
}

BlockedReporter* CoreWorker::ReporterHere() const {
  // As Ray: only a task's own thread, never an actor's worker (which holds its resources for its whole life).
  if (blocked_ == nullptr || executor_.HostsActor() || !executor_.OnTaskThread()) return nullptr;
  return blocked_.get();
}

absl::StatusOr<std::optional<Value>> CoreWorker::Fetch(const Ref& ref, int64_t wait_ms) {
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms + 10'000));
  GetObjectRequest request;
  request.set_object_id(ref.object_id);
  request.set_wait_ms(wait_ms);
  GetObjectReply reply;
  grpc::Status s = channels_.Worker(ref.owner_address)->GetObject(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::NotFoundError(absl::StrCat("object ", Hex(ref.object_id), " is lost: its owner at ",
                                            ref.owner_address, " cannot be reached (", s.error_message(), ")"));
  }
  if (reply.status() == GetObjectReply::FREED) {
    return absl::NotFoundError(
        absl::StrCat("object ", Hex(ref.object_id), " is lost: its owner at ", ref.owner_address, " no longer holds it"));
  }
  if (reply.status() == GetObjectReply::PENDING) return std::optional<Value>();
  Value value = FromProto(reply.value());
  table_.Put(ref.object_id, value);
  return std::optional<Value>(std::move(value));
}

absl::StatusOr<std::vector<Value>> CoreWorker::Get(const std::vector<Ref>& refs, int64_t timeout_ms) {
  const auto deadline = ReadDeadline(timeout_ms);
  LazyBlocked blocked(timeout_ms == 0 ? nullptr : ReporterHere());
  std::vector<Value> out;
  out.reserve(refs.size());
  size_t not_ready = 0;
  for (const Ref& ref : refs) {
    if (auto v = table_.Get(ref.object_id)) {
      out.push_back(std::move(*v));
      continue;
    }
    const bool owned = ref.owner_address == address_ || ref.owner_address.empty();
    if (owned) {
      if (table_.State(ref.object_id) == ObjectState::kPending) blocked.Now();
      ObjectState state = table_.WaitReady(ref.object_id, deadline);
      if (state == ObjectState::kUnknown || state == ObjectState::kFreed) {
        return absl::NotFoundError(absl::StrCat("object ", Hex(ref.object_id), " is not held by this process"));
      }
      if (auto v = table_.Get(ref.object_id)) {
        out.push_back(std::move(*v));
      } else {
        ++not_ready;
        out.emplace_back();
      }
      continue;
    }
    // Borrowed: asked of its owner, at once the first time, then waiting there (up to 30 s a call).
    std::optional<Value> value;
    for (bool first = true; !value; first = false) {
      int64_t wait_ms = first ? 0 : 30'000;
      if (!first && deadline != std::chrono::steady_clock::time_point::max()) {
        const auto left = deadline - std::chrono::steady_clock::now();
        wait_ms = std::min<int64_t>(
            wait_ms, std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
      }
      if (!first) blocked.Now();
      auto fetched = Fetch(ref, wait_ms);
      if (!fetched.ok()) return fetched.status();
      value = *std::move(fetched);
      if (!value && std::chrono::steady_clock::now() >= deadline) break;
    }
    if (value) {
      out.push_back(std::move(*value));
    } else {
      ++not_ready;
      out.emplace_back();
    }
  }
  if (not_ready > 0) {
    return absl::DeadlineExceededError(
        absl::StrCat(not_ready, " of ", refs.size(), " objects were not ready within ", timeout_ms, " ms"));
  }
  return out;
}

std::vector<size_t> CoreWorker::Wait(const std::vector<Ref>& refs, size_t num, int64_t timeout_ms) {
  const auto deadline = ReadDeadline(timeout_ms);
  LazyBlocked blocked(timeout_ms == 0 ? nullptr : ReporterHere());
  num = std::min(num, refs.size());
  bool all_owned = true;
  for (const Ref& r : refs) {
    if (!(r.owner_address == address_ || r.owner_address.empty())) all_owned = false;
  }
  std::vector<std::string> ids;
  for (const Ref& r : refs) ids.push_back(r.object_id);
  if (all_owned) {
    std::vector<size_t> ready = table_.WaitAny(ids, num, std::chrono::steady_clock::now());
    if (ready.size() >= num || timeout_ms == 0) return ready;
    blocked.Now();
    return table_.WaitAny(ids, num, deadline);
  }
  while (true) {
    std::vector<size_t> ready;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (table_.State(ids[i]) == ObjectState::kReady) {
        ready.push_back(i);
        continue;
      }
      const bool owned = refs[i].owner_address == address_ || refs[i].owner_address.empty();
      if (!owned) {
        auto fetched = Fetch(refs[i], 0);
        // A lost object counts as ready: reading it raises the loss.
        if (!fetched.ok() || fetched->has_value()) ready.push_back(i);
      }
    }
    if (ready.size() >= num || std::chrono::steady_clock::now() >= deadline) return ready;
    blocked.Now();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace torus::core
