#include "torus/head/agent_pool.h"

#include <condition_variable>
#include <functional>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

// Counts outstanding async calls and lets one thread wait for all of them.
class Latch {
 public:
  explicit Latch(size_t n) : left_(n) {}
  void CountDown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--left_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
};

// Runs one async unary call per entry and waits for all; `start` issues the call and must invoke `done` exactly once.
template <typename Request, typename Reply>
std::vector<absl::Status> RunAll(
    size_t n, const std::function<void(size_t, grpc::ClientContext*, Request*, Reply*, std::function<void(grpc::Status)>)>& start,
    const std::string& token, std::chrono::milliseconds timeout) {
  struct Call {
    grpc::ClientContext ctx;
    Request request;
    Reply reply;
  };
  std::vector<std::unique_ptr<Call>> calls(n);
  std::vector<absl::Status> results(n);
  Latch latch(n);
  for (size_t i = 0; i < n; ++i) {
    calls[i] = std::make_unique<Call>();
    calls[i]->ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    calls[i]->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    start(i, &calls[i]->ctx, &calls[i]->request, &calls[i]->reply, [&results, &latch, i](grpc::Status s) {
      results[i] = rpc::FromGrpc(s);
      latch.CountDown();
    });
  }
  if (n > 0) latch.Wait();
  return results;
}

}  // namespace

AgentPool::AgentPool(std::string token, std::chrono::milliseconds rpc_timeout)
    : token_(std::move(token)), rpc_timeout_(rpc_timeout) {}

rpc::NodeService::Stub* AgentPool::StubFor(const std::string& target) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& stub = stubs_[target];
  if (!stub) stub = rpc::NodeService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  return stub.get();
}

std::vector<absl::Status> AgentPool::Prepare(const std::vector<AgentBundles>& entries, std::chrono::milliseconds ttl) {
  return RunAll<rpc::PrepareBundlesRequest, rpc::PrepareBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::PrepareBundlesRequest* req, rpc::PrepareBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(entries[i].attempt);
        req->set_ttl_ms(ttl.count());
        for (const auto& b : entries[i].bundles) *req->add_bundles() = b;
        StubFor(entries[i].target)->async()->PrepareBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

std::vector<absl::Status> AgentPool::Commit(const std::vector<AgentBundles>& entries) {
  return RunAll<rpc::CommitBundlesRequest, rpc::CommitBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::CommitBundlesRequest* req, rpc::CommitBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(entries[i].attempt);
        StubFor(entries[i].target)->async()->CommitBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

void AgentPool::Cancel(const std::vector<AgentBundles>& entries) {
  RunAll<rpc::CancelBundlesRequest, rpc::CancelBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::CancelBundlesRequest* req, rpc::CancelBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(entries[i].attempt);
        StubFor(entries[i].target)->async()->CancelBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

void AgentPool::Release(const std::vector<AgentBundles>& entries) {
  RunAll<rpc::ReleaseBundlesRequest, rpc::ReleaseBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::ReleaseBundlesRequest* req, rpc::ReleaseBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        for (const auto& b : entries[i].bundles) req->add_indices(b.index());
        StubFor(entries[i].target)->async()->ReleaseBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

namespace {

template <typename Reply>
absl::StatusOr<Reply> Unary(const std::string& token, std::chrono::milliseconds timeout,
                            const std::function<grpc::Status(grpc::ClientContext*, Reply*)>& call) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  Reply reply;
  grpc::Status s = call(&ctx, &reply);
  if (!s.ok()) return rpc::FromGrpc(s);
  return reply;
}

}  // namespace

absl::StatusOr<rpc::StartWorkerReply> AgentPool::StartWorker(const std::string& target,
                                                             const rpc::StartWorkerRequest& request) {
  return Unary<rpc::StartWorkerReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::StartWorkerReply* r) {
    return StubFor(target)->StartWorker(ctx, request, r);
  });
}

std::vector<absl::StatusOr<rpc::StartWorkerReply>> AgentPool::StartWorkers(
    const std::vector<std::pair<std::string, rpc::StartWorkerRequest>>& targets_and_requests) {
  std::vector<absl::StatusOr<rpc::StartWorkerReply>> out(targets_and_requests.size(),
                                                         absl::UnknownError("not started"));
  std::vector<rpc::StartWorkerReply> replies(targets_and_requests.size());
  std::vector<absl::Status> statuses = RunAll<rpc::StartWorkerRequest, rpc::StartWorkerReply>(
      targets_and_requests.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::StartWorkerRequest* req, rpc::StartWorkerReply* reply,
          std::function<void(grpc::Status)> done) {
        *req = targets_and_requests[i].second;
        StubFor(targets_and_requests[i].first)
            ->async()
            ->StartWorker(ctx, req, reply, [done = std::move(done), reply, &replies, i](grpc::Status s) {
              replies[i] = *reply;
              done(s);
            });
      },
      token_, rpc_timeout_);
  for (size_t i = 0; i < out.size(); ++i) {
    if (statuses[i].ok()) {
      out[i] = replies[i];
    } else {
      out[i] = statuses[i];
    }
  }
  return out;
}

absl::Status AgentPool::StopWorker(const std::string& target, const std::string& worker_id, int64_t grace_ms) {
  rpc::StopWorkerRequest request;
  request.set_worker_id(worker_id);
  request.set_grace_ms(grace_ms);
  return Unary<rpc::StopWorkerReply>(token_, rpc_timeout_,
                                     [&](grpc::ClientContext* ctx, rpc::StopWorkerReply* r) {
                                       return StubFor(target)->StopWorker(ctx, request, r);
                                     })
      .status();
}

void AgentPool::StopOwner(const std::vector<std::string>& targets, const std::string& owner, int64_t grace_ms) {
  RunAll<rpc::StopOwnerRequest, rpc::StopOwnerReply>(
      targets.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::StopOwnerRequest* req, rpc::StopOwnerReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_owner(owner);
        req->set_grace_ms(grace_ms);
        StubFor(targets[i])->async()->StopOwner(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

absl::StatusOr<rpc::ReadWorkerLogReply> AgentPool::ReadWorkerLog(const std::string& target,
                                                                 const std::string& worker_id, int64_t offset,
                                                                 int64_t max_bytes) {
  rpc::ReadWorkerLogRequest request;
  request.set_worker_id(worker_id);
  request.set_offset(offset);
  request.set_max_bytes(max_bytes);
  return Unary<rpc::ReadWorkerLogReply>(token_, rpc_timeout_,
                                        [&](grpc::ClientContext* ctx, rpc::ReadWorkerLogReply* r) {
                                          return StubFor(target)->ReadWorkerLog(ctx, request, r);
                                        });
}

absl::StatusOr<int> AgentPool::FreePort(const std::string& target) {
  auto reply = Unary<rpc::FreePortReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::FreePortReply* r) {
    return StubFor(target)->FreePort(ctx, rpc::FreePortRequest(), r);
  });
  if (!reply.ok()) return reply.status();
  return reply->port();
}

absl::StatusOr<rpc::ListLogsReply> AgentPool::ListLogs(const std::string& target) {
  return Unary<rpc::ListLogsReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::ListLogsReply* r) {
    return StubFor(target)->ListLogs(ctx, rpc::ListLogsRequest(), r);
  });
}

absl::StatusOr<rpc::ReadLogReply> AgentPool::ReadLog(const std::string& target, const rpc::ReadLogRequest& request) {
  return Unary<rpc::ReadLogReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::ReadLogReply* r) {
    return StubFor(target)->ReadLog(ctx, request, r);
  });
}

}  // namespace torus::head
