#include "torus/head/agents/grpc_agent_pool.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>  // std::once_flag

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/tls/credentials.h"

namespace torus::head {

namespace {

// Counts outstanding async calls and lets one thread wait for all of them.
class Latch {
 public:
  explicit Latch(size_t n) : left_(n) {}
  void CountDown() {
    absl::MutexLock lock(&mu_);
    if (--left_ == 0) cv_.SignalAll();
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    while (left_ != 0) cv_.Wait(&mu_);
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  size_t left_ ABSL_GUARDED_BY(mu_);
};

// Runs one async unary call per entry and waits for all; `start` fills the request, issues the call and must invoke
// `done` exactly once. Replies are kept for the caller in `replies`.
// With `settles`, the first call that ends and settles (its status and reply) cancels the others.
template <typename Request, typename Reply>
std::vector<absl::Status> RunAll(
    size_t n,
    const std::function<void(size_t, grpc::ClientContext*, Request*, Reply*, std::function<void(grpc::Status)>)>& start,
    const std::string& token, std::chrono::milliseconds timeout, std::vector<Reply>* replies = nullptr,
    const std::function<bool(const grpc::Status&, const Reply&)>& settles = nullptr) {
  struct Call {
    grpc::ClientContext ctx;
    Request request;
    Reply reply;
  };
  std::vector<std::unique_ptr<Call>> calls(n);
  std::vector<absl::Status> results(n);
  Latch latch(n);
  std::once_flag settled;
  for (size_t i = 0; i < n; ++i) {
    calls[i] = std::make_unique<Call>();
    calls[i]->ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    calls[i]->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  }
  for (size_t i = 0; i < n; ++i) {
    start(i, &calls[i]->ctx, &calls[i]->request, &calls[i]->reply,
          [&results, &latch, &calls, &settles, &settled, i](grpc::Status s) {
            if (settles && settles(s, calls[i]->reply)) {
              std::call_once(settled, [&calls] {
                for (auto& call : calls) call->ctx.TryCancel();
              });
            }
            results[i] = rpc::FromGrpc(s);
            latch.CountDown();
          });
  }
  if (n > 0) latch.Wait();
  if (replies != nullptr) {
    replies->clear();
    for (auto& call : calls) replies->push_back(std::move(call->reply));
  }
  return results;
}

void ToBundleSpec(const HeldBundle& b, rpc::BundleSpec* spec) {
  spec->set_index(b.ledger_index);
  rpc::ToProto(b.resources, spec->mutable_resources());
  for (int chip : b.chips) spec->add_chips(chip);
  for (int gpu : b.gpus) spec->add_gpus(gpu);
}

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

GrpcAgentPool::GrpcAgentPool(std::string token, std::chrono::milliseconds rpc_timeout,
                             std::shared_ptr<grpc::ChannelCredentials> credentials)
    : token_(std::move(token)),
      rpc_timeout_(rpc_timeout),
      tls_(credentials != nullptr),
      credentials_(credentials ? std::move(credentials) : grpc::InsecureChannelCredentials()) {}

rpc::NodeService::Stub* GrpcAgentPool::StubFor(const std::string& target) {
  absl::MutexLock lock(&mu_);
  auto& stub = stubs_[target];
  if (!stub) {
    grpc::ChannelArguments args;
    if (tls_) tls::NameMembersByIdentity(&args);  // agents are dialled by address; their certificates name none
    stub = rpc::NodeService::NewStub(grpc::CreateCustomChannel(target, credentials_, args));
  }
  return stub.get();
}

std::vector<absl::Status> GrpcAgentPool::Prepare(const std::vector<AgentBundles>& entries, int64_t ttl_ms) {
  return RunAll<rpc::PrepareBundlesRequest, rpc::PrepareBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::PrepareBundlesRequest* req, rpc::PrepareBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        req->set_attempt(entries[i].attempt);
        req->set_ttl_ms(ttl_ms);
        req->set_commit(entries[i].commit_at_once);
        for (const HeldBundle& b : entries[i].bundles) ToBundleSpec(b, req->add_bundles());
        StubFor(entries[i].target)->async()->PrepareBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

std::vector<absl::Status> GrpcAgentPool::Commit(const std::vector<AgentBundles>& entries) {
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

void GrpcAgentPool::Cancel(const std::vector<AgentBundles>& entries) {
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

void GrpcAgentPool::Release(const std::vector<AgentBundles>& entries) {
  RunAll<rpc::ReleaseBundlesRequest, rpc::ReleaseBundlesReply>(
      entries.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::ReleaseBundlesRequest* req, rpc::ReleaseBundlesReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_group_id(entries[i].ledger_group);
        for (const HeldBundle& b : entries[i].bundles) req->add_indices(b.ledger_index);
        StubFor(entries[i].target)->async()->ReleaseBundles(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

namespace {

// A start that needs packages may first fetch them from the head: a minute, and a second per 10 MB of the largest.
std::chrono::milliseconds PackageFetchAllowance(const std::vector<std::pair<std::string, StartSpec>>& starts) {
  uint64_t largest = 0;
  bool any = false;
  for (const auto& [target, spec] : starts) {
    if (spec.working_dir_package) {
      any = true;
      largest = std::max(largest, spec.working_dir_package->size);
    }
    for (const Package& p : spec.py_module_packages) {
      any = true;
      largest = std::max(largest, p.size);
    }
  }
  if (!any) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(60'000 + static_cast<int64_t>(largest / 10'000));
}

}  // namespace

std::vector<absl::StatusOr<int64_t>> GrpcAgentPool::StartWorkers(
    const std::vector<std::pair<std::string, StartSpec>>& targets_and_specs) {
  std::vector<rpc::StartWorkerReply> replies;
  std::vector<absl::Status> statuses = RunAll<rpc::StartWorkerRequest, rpc::StartWorkerReply>(
      targets_and_specs.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::StartWorkerRequest* req, rpc::StartWorkerReply* reply,
          std::function<void(grpc::Status)> done) {
        const StartSpec& spec = targets_and_specs[i].second;
        req->set_worker_id(spec.id.str());
        req->set_owner(spec.owner);
        for (const std::string& arg : spec.argv) req->add_argv(arg);
        req->mutable_env_set()->insert(spec.env_set.begin(), spec.env_set.end());
        for (const std::string& key : spec.env_unset) req->add_env_unset(key);
        req->set_cwd(spec.cwd);
        req->set_only_if_new(spec.only_if_new);
        auto to_ref = [](const Package& p, rpc::PackageRef* ref) {
          ref->set_name(p.name);
          ref->set_sha256(p.sha256);
          ref->set_size(p.size);
        };
        if (spec.working_dir_package) to_ref(*spec.working_dir_package, req->mutable_working_dir_package());
        for (const Package& p : spec.py_module_packages) to_ref(p, req->add_py_module_packages());
        if (spec.bundle >= 0) {
          req->set_group_id(spec.ledger_group);
          req->set_bundle_index(spec.bundle);
        }
        StubFor(targets_and_specs[i].first)->async()->StartWorker(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_ + PackageFetchAllowance(targets_and_specs), &replies);
  std::vector<absl::StatusOr<int64_t>> out;
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].ok()) {
      out.push_back(replies[i].pid());
    } else {
      out.push_back(statuses[i]);
    }
  }
  return out;
}

void GrpcAgentPool::StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& targets_and_workers,
                                int64_t grace_ms) {
  RunAll<rpc::StopWorkerRequest, rpc::StopWorkerReply>(
      targets_and_workers.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::StopWorkerRequest* req, rpc::StopWorkerReply* reply,
          std::function<void(grpc::Status)> done) {
        req->set_worker_id(targets_and_workers[i].second.str());
        req->set_grace_ms(grace_ms);
        StubFor(targets_and_workers[i].first)->async()->StopWorker(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_);
}

namespace {

// Reads grouped by agent: one ReadWorkerLogs call per agent carries all of its reads.
struct AgentReads {
  std::string target;
  std::vector<size_t> reads;  // indices into the caller's reads
  int64_t wait_ms = 0;        // the longest of theirs
};

std::vector<AgentReads> ByAgent(const std::vector<LogRead>& reads) {
  std::vector<AgentReads> out;
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < reads.size(); ++i) {
    auto [it, inserted] = position.emplace(reads[i].target, out.size());
    if (inserted) out.push_back(AgentReads{reads[i].target, {}, 0});
    AgentReads& a = out[it->second];
    a.reads.push_back(i);
    a.wait_ms = std::max(a.wait_ms, reads[i].wait_ms);
  }
  return out;
}

// One agent's call: its reads, waiting as long as the longest of theirs.
void FillRequest(const std::vector<LogRead>& reads, const AgentReads& agent, rpc::ReadWorkerLogsRequest* req) {
  req->set_wait_ms(agent.wait_ms);
  for (size_t i : agent.reads) {
    rpc::ReadWorkerLogRequest* read = req->add_reads();
    read->set_worker_id(reads[i].worker.str());
    read->set_offset(reads[i].offset);
    read->set_max_bytes(reads[i].max_bytes);
  }
}

}  // namespace

std::vector<absl::StatusOr<LogChunk>> GrpcAgentPool::ReadWorkerLogs(const std::vector<LogRead>& reads) {
  const std::vector<AgentReads> agents = ByAgent(reads);
  int64_t longest_wait = 0;
  for (const AgentReads& a : agents) longest_wait = std::max(longest_wait, a.wait_ms);
  // Waiting: the first agent to answer with output ends the others' waits.
  std::atomic<bool> settled{false};
  std::function<bool(const grpc::Status&, const rpc::ReadWorkerLogsReply&)> settles;
  if (longest_wait > 0) {
    settles = [&settled](const grpc::Status& s, const rpc::ReadWorkerLogsReply& reply) {
      if (!s.ok()) return false;
      for (const rpc::ReadWorkerLogResult& r : reply.results()) {
        if (r.error_code() == 0 && !r.chunk().data().empty()) {
          settled = true;
          return true;
        }
      }
      return false;
    };
  }
  std::vector<rpc::ReadWorkerLogsReply> replies;
  std::vector<absl::Status> statuses = RunAll<rpc::ReadWorkerLogsRequest, rpc::ReadWorkerLogsReply>(
      agents.size(),
      [&](size_t i, grpc::ClientContext* ctx, rpc::ReadWorkerLogsRequest* req, rpc::ReadWorkerLogsReply* reply,
          std::function<void(grpc::Status)> done) {
        FillRequest(reads, agents[i], req);
        StubFor(agents[i].target)->async()->ReadWorkerLogs(ctx, req, reply, std::move(done));
      },
      token_, rpc_timeout_ + std::chrono::milliseconds(longest_wait), &replies, settles);
  std::vector<absl::StatusOr<LogChunk>> out(reads.size(), absl::InternalError("not read"));
  for (size_t a = 0; a < agents.size(); ++a) {
    for (size_t k = 0; k < agents[a].reads.size(); ++k) {
      const LogRead& read = reads[agents[a].reads[k]];
      absl::StatusOr<LogChunk>& chunk = out[agents[a].reads[k]];
      if (settled && statuses[a].code() == absl::StatusCode::kCancelled) {
        chunk = LogChunk{"", read.offset, false};  // its wait was ended by another agent's output
      } else if (!statuses[a].ok()) {
        chunk = statuses[a];
      } else if (static_cast<int>(k) >= replies[a].results_size()) {
        chunk = absl::InternalError("the agent answered fewer reads than asked");
      } else if (const rpc::ReadWorkerLogResult& r = replies[a].results(static_cast<int>(k)); r.error_code() != 0) {
        chunk = absl::Status(static_cast<absl::StatusCode>(r.error_code()), r.error());
      } else {
        chunk = LogChunk{r.chunk().data(), r.chunk().next_offset(), r.chunk().finished()};
      }
    }
  }
  return out;
}

absl::StatusOr<int> GrpcAgentPool::FreePort(const std::string& target) {
  auto reply = Unary<rpc::FreePortReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::FreePortReply* r) {
    return StubFor(target)->FreePort(ctx, rpc::FreePortRequest(), r);
  });
  if (!reply.ok()) return reply.status();
  return reply->port();
}

absl::StatusOr<rpc::ListLogsReply> GrpcAgentPool::ListLogs(const std::string& target) {
  return Unary<rpc::ListLogsReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::ListLogsReply* r) {
    return StubFor(target)->ListLogs(ctx, rpc::ListLogsRequest(), r);
  });
}

absl::StatusOr<rpc::ReadLogReply> GrpcAgentPool::ReadLog(const std::string& target,
                                                         const rpc::ReadLogRequest& request) {
  return Unary<rpc::ReadLogReply>(token_, rpc_timeout_, [&](grpc::ClientContext* ctx, rpc::ReadLogReply* r) {
    return StubFor(target)->ReadLog(ctx, request, r);
  });
}

}  // namespace torus::head
