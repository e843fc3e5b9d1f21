#include "torus/node/node_service.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace torus::node {

using rpc::FinishCall;

namespace {

constexpr int64_t kMaxGraceMs = 3'600'000;

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

grpc::Status CheckGrace(int64_t grace_ms) {
  if (grace_ms < 0 || grace_ms > kMaxGraceMs) {
    return InvalidArgument(absl::StrCat("grace_ms must be 0..", kMaxGraceMs, " (got ", grace_ms, ")"));
  }
  return grpc::Status::OK;
}

}  // namespace

void ToProto(const WorkerInfo& info, rpc::WorkerView* view) {
  view->set_worker_id(info.worker_id);
  view->set_owner(info.owner);
  view->set_pid(info.pid);
  view->set_running(info.running);
  view->set_exit_code(info.exit_code);
  view->set_signal(info.signal);
  view->set_start_time_ms(info.start_time_ms);
  view->set_end_time_ms(info.end_time_ms);
  view->set_stopped(info.stopped);
  view->set_log_path(info.log_path);
  view->set_group_id(info.group_id);
  if (info.bundle_index) view->set_bundle_index(*info.bundle_index);
  for (int chip : info.chips) view->add_chips(chip);
  for (int gpu : info.gpus) view->add_gpus(gpu);
}

void ToProto(const LedgerEntry& e, rpc::LedgerEntryView* view) {
  view->set_group_id(e.group_id);
  view->set_attempt(e.attempt);
  view->set_committed(e.committed);
  view->set_released(e.released);
  for (const std::string& w : e.workers) view->add_workers(w);
  rpc::BundleSpec* spec = view->mutable_bundle();
  spec->set_index(e.bundle.index);
  rpc::ToProto(e.bundle.resources, spec->mutable_resources());
  for (int chip : e.bundle.chips) spec->add_chips(chip);
  for (int gpu : e.bundle.gpus) spec->add_gpus(gpu);
}

absl::StatusOr<EnvChange> BundleDeviceEnv(const HostDevices& host, const std::vector<int>& chips,
                                          const std::vector<int>& gpus,
                                          const std::map<std::string, std::string>& worker_env,
                                          const std::map<std::string, std::string>& inherited) {
  EnvChange change;
  if (host.tpu_generation && host.chips > 0) {
    auto tpu = TpuIsolationEnv(*host.tpu_generation, host.chips, chips, inherited);
    if (!tpu.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("its chips cannot be isolated: ", tpu.status().message()));
    }
    for (auto& [key, value] : tpu->set) {
      // Holding no chip, a worker gets the CPU guard only where it did not choose for itself.
      if (chips.empty() && worker_env.contains(key)) continue;
      change.set[key] = value;
    }
    change.unset = tpu->unset;
  }
  if (host.gpus > 0) {
    for (auto& [key, value] : GpuIsolationEnv(gpus).set) change.set[key] = value;
  }
  std::erase_if(change.unset, [&](const std::string& key) { return change.set.contains(key); });
  return change;
}

bool IsReservedPort(int port) {
  return (port >= 8431 && port <= 8438) || (port >= 8471 && port <= 8479) || port == 8081;
}

// A port that is free on every address of this host: frameworks bind their rendezvous (torch's TCPStore, JAX's
// coordinator) to the wildcard address, so a port free on the node's address alone may still be taken. The kernel
// picks it for a dual-stack wildcard socket (IPv4 only when IPv6 is off).
absl::StatusOr<int> PickFreePort(const std::string& ip) {
  absl::Status last = absl::ResourceExhaustedError("no free port outside the TPU runtime's ports after 32 tries");
  for (int attempt = 0; attempt < 32; ++attempt) {
    int port = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      int off = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      sockaddr_in6 any6{};
      any6.sin6_family = AF_INET6;
      any6.sin6_addr = in6addr_any;
      socklen_t length = sizeof(any6);
      if (bind(fd, reinterpret_cast<sockaddr*>(&any6), sizeof(any6)) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&any6), &length) == 0) {
        port = ntohs(any6.sin6_port);
      }
      close(fd);
    }
    if (port == 0) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      socklen_t length = sizeof(any4);
      if (bind(fd, reinterpret_cast<sockaddr*>(&any4), sizeof(any4)) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&any4), &length) == 0) {
        port = ntohs(any4.sin_port);
      } else {
        last = absl::UnavailableError(absl::StrCat("cannot bind a port on ", ip, ": ", std::strerror(errno)));
      }
      close(fd);
    }
    if (port == 0) break;
    if (!IsReservedPort(port)) return port;
  }
  return last;
}

NodeServiceImpl::NodeServiceImpl(BundleLedger* ledger, WorkerSupervisor* workers, std::string node_ip,
                                 std::string token, std::function<void()> on_change, const LogFiles* logs,
                                 HostDevices devices, int64_t release_grace_ms)
    : ledger_(ledger),
      workers_(workers),
      node_ip_(std::move(node_ip)),
      token_(std::move(token)),
      on_change_(std::move(on_change)),
      logs_(logs),
      devices_(std::move(devices)),
      release_grace_ms_(release_grace_ms) {}

grpc::Status NodeServiceImpl::CheckControl(const grpc::CallbackServerContext* ctx) const {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return auth;
  if (!head_only_control_) return grpc::Status::OK;
  const std::string identity = tls::PeerIdentity(ctx);
  if (identity == tls::kHeadIdentity) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      identity.empty() ? "only the head may reserve bundles or start and stop workers here (the "
                                         "cluster token is not enough: the call must carry the head's certificate)"
                                       : absl::StrCat("only the head may reserve bundles or start and stop workers "
                                                      "here, not '", identity, "'"));
}

grpc::ServerUnaryReactor* NodeServiceImpl::PrepareBundles(grpc::CallbackServerContext* ctx,
                                                          const rpc::PrepareBundlesRequest* request,
                                                          rpc::PrepareBundlesReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  if (request->group_id().empty() || request->group_id().size() > 128) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "group_id must be 1-128 characters"));
  }
  if (request->ttl_ms() <= 0 || request->ttl_ms() > 3'600'000) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ttl_ms must be 1..3600000"));
  }
  std::vector<LedgerBundle> bundles;
  for (const rpc::BundleSpec& spec : request->bundles()) {
    auto resources = rpc::FromProto(spec.resources(), absl::StrCat("bundle ", spec.index()));
    if (!resources.ok()) return FinishCall(ctx, rpc::ToGrpc(resources.status()));
    bundles.push_back({spec.index(), *std::move(resources), {spec.chips().begin(), spec.chips().end()},
                       {spec.gpus().begin(), spec.gpus().end()}});
  }
  absl::Status s = ledger_->Prepare(request->group_id(), request->attempt(), bundles, request->ttl_ms() * 1000);
  if (s.ok() && request->commit()) s = ledger_->Commit(request->group_id(), request->attempt());
  if (s.ok()) {
    on_change_();
  } else {
    spdlog::info("prepare of group {} attempt {} refused: {}", request->group_id(), request->attempt(),
                 std::string(s.message()));
  }
  return FinishCall(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* NodeServiceImpl::CommitBundles(grpc::CallbackServerContext* ctx,
                                                         const rpc::CommitBundlesRequest* request,
                                                         rpc::CommitBundlesReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  absl::Status s = ledger_->Commit(request->group_id(), request->attempt());
  return FinishCall(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* NodeServiceImpl::CancelBundles(grpc::CallbackServerContext* ctx,
                                                         const rpc::CancelBundlesRequest* request,
                                                         rpc::CancelBundlesReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  ledger_->Cancel(request->group_id(), request->attempt());
  on_change_();
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ReleaseBundles(grpc::CallbackServerContext* ctx,
                                                          const rpc::ReleaseBundlesRequest* request,
                                                          rpc::ReleaseBundlesReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  if (grpc::Status s = CheckGrace(request->grace_ms()); !s.ok()) return FinishCall(ctx, s);
  BundleLedger::Released released =
      ledger_->Release(request->group_id(), {request->indices().begin(), request->indices().end()});
  // The bundle stays held until its workers are gone: they are stopped now.
  const int64_t grace_ms = request->grace_ms() > 0 ? request->grace_ms() : release_grace_ms_;
  for (const std::string& w : released.workers) workers_->Stop(w, grace_ms * 1000).IgnoreError();
  reply->set_released(released.bundles);
  on_change_();
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::GetLedger(grpc::CallbackServerContext* ctx,
                                                     const rpc::GetLedgerRequest* request, rpc::LedgerView* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  ledger_->Expire();
  rpc::ToProto(ledger_->Available(), reply->mutable_resources_available());
  for (int chip : ledger_->BusyChips()) reply->add_busy_chips(chip);
  for (const LedgerEntry& e : ledger_->Entries()) ToProto(e, reply->add_entries());
  rpc::ToProto(ledger_->total(), reply->mutable_resources_total());
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::StartWorker(grpc::CallbackServerContext* ctx,
                                                       const rpc::StartWorkerRequest* request,
                                                       rpc::StartWorkerReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  if (request->only_if_new() && workers_->Knows(request->worker_id())) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                        absl::StrCat("worker ", request->worker_id(), " has run on this node already")));
  }
  const bool needs_packages = request->has_working_dir_package() || request->py_module_packages_size() > 0;
  if (!needs_packages) return FinishCall(ctx, StartNow(*request, {}, reply));
  if (packages_ == nullptr) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this agent keeps no packages"));
  }
  bool cached = !request->has_working_dir_package() || packages_->Has(request->working_dir_package());
  for (const rpc::PackageRef& ref : request->py_module_packages()) cached = cached && packages_->Has(ref);
  if (cached) return FinishCall(ctx, StartWithPackages(*request, reply, [] { return false; }));
  // A fetch takes as long as the package's bytes take to arrive: not on a gRPC callback thread.
  {
    absl::MutexLock lock(&waits_mu_);
    if (stopping_) return FinishCall(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is stopping"));
    ++waits_;
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::thread([this, ctx, request, reply, reactor] {
    reactor->Finish(StartWithPackages(*request, reply, [this, ctx] { return ctx->IsCancelled() || stopping_; }));
    absl::MutexLock lock(&waits_mu_);
    --waits_;
    waits_cv_.SignalAll();
  }).detach();
  return reactor;
}

grpc::Status NodeServiceImpl::StartWithPackages(const rpc::StartWorkerRequest& request, rpc::StartWorkerReply* reply,
                                                const std::function<bool()>& abandoned) {
  Locations where;
  // The packages are in use by this worker until it exits (OnWorkerExited); a start that fails gives them back.
  std::vector<std::string> acquired;
  auto give_back = [&](grpc::Status status) {
    for (const std::string& sha : acquired) packages_->Release(sha);
    return status;
  };
  if (request.has_working_dir_package()) {
    auto dir = packages_->Acquire(request.working_dir_package());
    if (!dir.ok()) return rpc::ToGrpc(dir.status());
    acquired.push_back(request.working_dir_package().sha256());
    where.cwd = *dir;
  }
  for (const rpc::PackageRef& ref : request.py_module_packages()) {
    auto dir = packages_->Acquire(ref);
    if (!dir.ok()) return give_back(rpc::ToGrpc(dir.status()));
    acquired.push_back(ref.sha256());
    where.python_path.push_back(*dir);
  }
  // The head gave up on this start (its deadline passed while the package came) and counts the worker as never
  // started, or this agent is stopping: starting it now would leave a process nobody stops.
  if (abandoned()) {
    spdlog::info("start of worker {} abandoned after its packages were fetched", request.worker_id());
    return give_back(
        grpc::Status(grpc::StatusCode::CANCELLED, "the start was abandoned while its packages were fetched"));
  }
  grpc::Status started = StartNow(request, where, reply);
  if (!started.ok()) return give_back(started);
  absl::MutexLock lock(&package_users_mu_);
  package_users_[request.worker_id()] = std::move(acquired);
  return started;
}

void NodeServiceImpl::OnWorkerExited(const std::string& worker_id) {
  if (packages_ == nullptr) return;
  std::vector<std::string> shas;
  {
    absl::MutexLock lock(&package_users_mu_);
    auto it = package_users_.find(worker_id);
    if (it == package_users_.end()) return;
    shas = std::move(it->second);
    package_users_.erase(it);
  }
  for (const std::string& sha : shas) packages_->Release(sha);
}

grpc::Status NodeServiceImpl::StartNow(const rpc::StartWorkerRequest& request_ref, const Locations& where,
                                       rpc::StartWorkerReply* reply) {
  const rpc::StartWorkerRequest* request = &request_ref;
  WorkerSpec spec{.worker_id = request->worker_id(),
                  .owner = request->owner(),
                  .argv = {request->argv().begin(), request->argv().end()},
                  .env_set = {request->env_set().begin(), request->env_set().end()},
                  .env_unset = {request->env_unset().begin(), request->env_unset().end()},
                  .cwd = where.cwd.empty() ? request->cwd() : where.cwd,
                  .only_if_new = request->only_if_new()};
  if (!where.python_path.empty()) {
    std::vector<std::string> path = where.python_path;
    auto set = spec.env_set.find("PYTHONPATH");
    auto inherited = devices_.base_env.find("PYTHONPATH");
    const bool unset = std::find(spec.env_unset.begin(), spec.env_unset.end(), "PYTHONPATH") != spec.env_unset.end();
    if (set != spec.env_set.end()) {
      if (!set->second.empty()) path.push_back(set->second);
    } else if (!unset && inherited != devices_.base_env.end() && !inherited->second.empty()) {
      path.push_back(inherited->second);
    }
    spec.env_set["PYTHONPATH"] = absl::StrJoin(path, ":");
  }
  bool bound = false;
  if (request->has_bundle_index()) {
    // A worker on a bundle: only one this agent holds committed for that group, and only its devices.
    if (absl::Status s = ValidateWorkerId(spec.worker_id); !s.ok()) return rpc::ToGrpc(s);
    if (request->group_id().empty()) return InvalidArgument("group_id is required with bundle_index");
    auto bundle = ledger_->Bind(request->group_id(), request->bundle_index(), spec.worker_id);
    if (!bundle.ok()) {
      spdlog::info("start of worker {} refused: {}", spec.worker_id, std::string(bundle.status().message()));
      return rpc::ToGrpc(bundle.status());
    }
    bound = true;
    spec.chips = bundle->chips;
    spec.gpus = bundle->gpus;
    spec.group_id = request->group_id();
    spec.bundle_index = request->bundle_index();
    std::map<std::string, std::string> inherited = devices_.base_env;
    for (const auto& [k, v] : spec.env_set) inherited[k] = v;
    for (const std::string& k : spec.env_unset) inherited.erase(k);
    auto devices = BundleDeviceEnv(devices_, spec.chips, spec.gpus, spec.env_set, inherited);
    if (!devices.ok()) {
      ledger_->Unbind(spec.worker_id);
      return rpc::ToGrpc(absl::FailedPreconditionError(absl::StrCat(
          "bundle ", request->bundle_index(), " of group ", request->group_id(), ": ", devices.status().message())));
    }
    for (const auto& [k, v] : devices->set) spec.env_set[k] = v;
    for (const std::string& k : devices->unset) {
      spec.env_set.erase(k);
      spec.env_unset.push_back(k);
    }
  }
  auto started = workers_->Start(spec);
  if (!started.ok()) {
    // A duplicate start leaves the running worker bound; any other failure (a resend of a worker that has ended
    // included) gives the bundle back.
    if (bound && !(absl::IsAlreadyExists(started.status()) && workers_->IsRunning(spec.worker_id))) {
      ledger_->Unbind(spec.worker_id);
    }
    spdlog::info("start of worker {} refused: {}", request->worker_id(), std::string(started.status().message()));
    return rpc::ToGrpc(started.status());
  }
  reply->set_pid(started->pid);
  reply->set_log_path(started->log_path);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* NodeServiceImpl::StopWorker(grpc::CallbackServerContext* ctx,
                                                      const rpc::StopWorkerRequest* request,
                                                      rpc::StopWorkerReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  if (absl::Status s = ValidateWorkerId(request->worker_id()); !s.ok()) return FinishCall(ctx, rpc::ToGrpc(s));
  if (grpc::Status s = CheckGrace(request->grace_ms()); !s.ok()) return FinishCall(ctx, s);
  auto was_running = workers_->Stop(request->worker_id(), request->grace_ms() * 1000);
  if (!was_running.ok()) return FinishCall(ctx, rpc::ToGrpc(was_running.status()));
  reply->set_was_running(*was_running);
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::StopOwner(grpc::CallbackServerContext* ctx,
                                                     const rpc::StopOwnerRequest* request,
                                                     rpc::StopOwnerReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  if (request->owner().empty()) return FinishCall(ctx, InvalidArgument("owner must not be empty"));
  if (grpc::Status s = CheckGrace(request->grace_ms()); !s.ok()) return FinishCall(ctx, s);
  reply->set_stopped(workers_->StopOwner(request->owner(), request->grace_ms() * 1000));
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ReadWorkerLog(grpc::CallbackServerContext* ctx,
                                                         const rpc::ReadWorkerLogRequest* request,
                                                         rpc::ReadWorkerLogReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  if (absl::Status s = ValidateWorkerId(request->worker_id()); !s.ok()) return FinishCall(ctx, rpc::ToGrpc(s));
  if (request->offset() < 0) return FinishCall(ctx, InvalidArgument("offset must be >= 0"));
  if (request->max_bytes() < 0) return FinishCall(ctx, InvalidArgument("max_bytes must be >= 0 (0 = 1 MiB)"));
  if (request->wait_ms() < 0 || request->wait_ms() > 60'000) {
    return FinishCall(ctx, InvalidArgument("wait_ms must be 0..60000"));
  }
  auto answer = [this, request, reply]() -> grpc::Status {
    auto chunk = workers_->ReadLog(request->worker_id(), request->offset(), request->max_bytes());
    if (!chunk.ok()) return rpc::ToGrpc(chunk.status());
    reply->set_data(std::move(chunk->data));
    reply->set_next_offset(chunk->next_offset);
    reply->set_finished(chunk->finished);
    return grpc::Status::OK;
  };
  grpc::Status now = answer();
  if (!now.ok() || request->wait_ms() == 0 || !reply->data().empty() || reply->finished()) {
    return FinishCall(ctx, now);
  }
  {
    absl::MutexLock lock(&waits_mu_);
    if (waits_ >= kMaxLogWaits || stopping_) return FinishCall(ctx, now);
    ++waits_;
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(request->wait_ms());
  std::thread([this, ctx, request, reactor, deadline, answer] {
    absl::Status waited = workers_->WaitForLog(request->worker_id(), request->offset(), deadline,
                                               [this, ctx] { return stopping_.load() || ctx->IsCancelled(); });
    reactor->Finish(waited.ok() ? answer() : rpc::ToGrpc(waited));
    absl::MutexLock lock(&waits_mu_);
    --waits_;
    waits_cv_.SignalAll();
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::ReadWorkerLogs(grpc::CallbackServerContext* ctx,
                                                          const rpc::ReadWorkerLogsRequest* request,
                                                          rpc::ReadWorkerLogsReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  if (request->wait_ms() < 0 || request->wait_ms() > 60'000) {
    return FinishCall(ctx, InvalidArgument("wait_ms must be 0..60000"));
  }
  if (request->reads_size() > 4096) return FinishCall(ctx, InvalidArgument("at most 4096 reads in one call"));
  // Reads every log into the reply; the logs to wait on are those read fine whose workers still run. Nothing to wait
  // for when one has something new or none is left to wait on (a read that fails is answered, not waited on).
  using Waits = std::vector<std::pair<std::string, int64_t>>;
  auto answer = [this, request, reply](Waits* waits) -> bool {
    reply->clear_results();
    bool news = false;
    for (const rpc::ReadWorkerLogRequest& read : request->reads()) {
      rpc::ReadWorkerLogResult* result = reply->add_results();
      absl::StatusOr<LogChunk> chunk = absl::InvalidArgumentError("offset must be >= 0");
      if (absl::Status s = ValidateWorkerId(read.worker_id()); !s.ok()) {
        chunk = s;
      } else if (read.max_bytes() < 0) {
        chunk = absl::InvalidArgumentError("max_bytes must be >= 0 (0 = 1 MiB)");
      } else if (read.offset() >= 0) {
        chunk = workers_->ReadLog(read.worker_id(), read.offset(), read.max_bytes());
      }
      if (!chunk.ok()) {
        result->set_error_code(static_cast<int>(chunk.status().code()));
        result->set_error(std::string(chunk.status().message()));
        continue;
      }
      news = news || !chunk->data.empty();
      if (waits != nullptr && !chunk->finished) waits->emplace_back(read.worker_id(), read.offset());
      result->mutable_chunk()->set_data(std::move(chunk->data));
      result->mutable_chunk()->set_next_offset(chunk->next_offset);
      result->mutable_chunk()->set_finished(chunk->finished);
    }
    return news;
  };
  Waits logs;
  if (answer(&logs) || logs.empty() || request->wait_ms() == 0) return FinishCall(ctx, grpc::Status::OK);
  {
    absl::MutexLock lock(&waits_mu_);
    if (waits_ >= kMaxLogWaits || stopping_) return FinishCall(ctx, grpc::Status::OK);
    ++waits_;
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(request->wait_ms());
  std::thread([this, ctx, reactor, deadline, answer, logs = std::move(logs)] {
    workers_->WaitForLogs(logs, deadline, [this, ctx] { return stopping_.load() || ctx->IsCancelled(); })
        .IgnoreError();  // a worker forgotten meanwhile: the reads say so
    answer(nullptr);
    reactor->Finish(grpc::Status::OK);
    absl::MutexLock lock(&waits_mu_);
    --waits_;
    waits_cv_.SignalAll();
  }).detach();
  return reactor;
}

NodeServiceImpl::~NodeServiceImpl() {
  stopping_ = true;
  absl::MutexLock lock(&waits_mu_);
  while (waits_ != 0) waits_cv_.Wait(&waits_mu_);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ListWorkers(grpc::CallbackServerContext* ctx,
                                                       const rpc::ListWorkersRequest* request,
                                                       rpc::ListWorkersReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  for (const WorkerInfo& info : workers_->List()) ToProto(info, reply->add_workers());
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::FreePort(grpc::CallbackServerContext* ctx,
                                                    const rpc::FreePortRequest* request, rpc::FreePortReply* reply) {
  if (grpc::Status auth = CheckControl(ctx); !auth.ok()) return FinishCall(ctx, auth);
  auto port = PickFreePort(node_ip_);
  if (!port.ok()) return FinishCall(ctx, rpc::ToGrpc(port.status()));
  reply->set_port(*port);
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ListLogs(grpc::CallbackServerContext* ctx,
                                                    const rpc::ListLogsRequest* request, rpc::ListLogsReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  if (logs_ == nullptr) return FinishCall(ctx, grpc::Status::OK);
  reply->set_tpu_log_dir(logs_->tpu_log_dir());
  for (const LogFileEntry& entry : logs_->List()) {
    rpc::LogFile* file = reply->add_files();
    file->set_name(entry.name);
    file->set_size(entry.size);
    file->set_modified_ms(entry.modified_ms);
  }
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ReadLog(grpc::CallbackServerContext* ctx,
                                                   const rpc::ReadLogRequest* request, rpc::ReadLogReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  if (logs_ == nullptr) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND,
                                        absl::StrCat("name '", request->name(), "': this agent serves no log files")));
  }
  auto read = logs_->Read(request->name(), request->offset(), request->max_bytes());
  if (!read.ok()) return FinishCall(ctx, rpc::ToGrpc(read.status()));
  reply->set_data(std::move(read->data));
  reply->set_offset(read->offset);
  reply->set_size(read->size);
  return FinishCall(ctx, grpc::Status::OK);
}

}  // namespace torus::node
