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

std::vector<absl::Status> AgentPool::Prepare(const std::vector<AgentBundles>& entries, uint64_t attempt,
                                             std::chrono::milliseconds ttl) {
  return RunAll<rpc::PrepareBundlesRequest, rpc::PrepareBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::PrepareBundlesRequest* req, rpc::PrepareBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(attempt);
        req->set_ttl_ms(ttl.count());
        for (const auto& b : entries[i].bundles) *req->add_bundles() = b;
        StubFor(entries[i].target)->async()->PrepareBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

std::vector<absl::Status> AgentPool::Commit(const std::vector<AgentBundles>& entries, uint64_t attempt) {
  return RunAll<rpc::CommitBundlesRequest, rpc::CommitBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::CommitBundlesRequest* req, rpc::CommitBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(attempt);
        StubFor(entries[i].target)->async()->CommitBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

void AgentPool::Cancel(const std::vector<AgentBundles>& entries, uint64_t attempt) {
  RunAll<rpc::CancelBundlesRequest, rpc::CancelBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::CancelBundlesRequest* req, rpc::CancelBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(attempt);
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

}  // namespace torus::head
