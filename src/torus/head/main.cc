// torus-head: parses flags, wires the head's components together and serves until SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "torus/common/clock.h"
#include "torus/common/termination.h"
#include "torus/head/agents/grpc_agent_pool.h"
#include "torus/head/owners/owner_monitor.h"
#include "torus/head/api/actors_http.h"
#include "torus/head/api/autoscaler_http.h"
#include "torus/head/autoscaler/autoscaler.h"
#include "torus/head/autoscaler/kubernetes_provider.h"
#include "torus/head/autoscaler/local_provider.h"
#include "torus/head/api/dashboard_http.h"
#include "torus/head/api/event_log.h"
#include "torus/head/api/event_service.h"
#include "torus/head/api/events_http.h"
#include "torus/head/admission/admission_service.h"
#include "torus/head/head_flags.h"
#include "torus/head/admission/cluster_authority.h"
#include "torus/head/api/head_service.h"
#include "torus/head/api/beat_server.h"
#include "torus/head/api/node_callers.h"
#include "torus/head/api/http_api.h"
#include "torus/head/api/packages_http.h"
#include "torus/head/packages/package_store.h"
#include "torus/head/api/jobs_http.h"
#include "torus/head/api/log_tail_http.h"
#include "torus/head/api/metrics_http.h"
#include "torus/head/api/runs_http.h"
#include "torus/head/api/services_http.h"
#include "torus/head/services/service_controller.h"
#include "torus/serve/ingress.h"
#include "torus/head/metrics/metrics_store.h"
#include "torus/head/metrics/server_metrics.h"
#include "torus/head/nodes/failure_detector.h"
#include "torus/head/nodes/membership.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/placement/placement_service.h"
#include "torus/head/state/etcd_journal.h"
#include "torus/head/state/journal.h"
#include "torus/head/state/state_store.h"
#include "torus/head/workloads/job_service.h"
#include "torus/head/workloads/run_service.h"
#include "torus/head/workloads/workload_driver.h"
#include "torus/rpc/advertised_host.h"
#include "torus/rpc/auth.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace {

using torus::head::HeadFlags;
using torus::head::ParseHeadFlags;


// 5 random hex digits: the part of an autoscaled slice's name that keeps it unique.
std::string RandomSliceSuffix() {
  static thread_local std::mt19937 generator(std::random_device{}());
  return absl::StrFormat("%05x", std::uniform_int_distribution<uint32_t>(0, 0xfffff)(generator));
}


// Writes `contents` to `path` atomically (temp file + rename), so readers never see half a file.
bool WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << contents)) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int Run(const HeadFlags& flags) {
  std::error_code ec;
  std::filesystem::create_directories(flags.session_dir, ec);
  if (ec) {
    spdlog::error("cannot create session directory {}: {}", flags.session_dir, ec.message());
    return 1;
  }

  torus::RealClock clock;
  torus::head::RandomIdGenerator ids;
  std::unique_ptr<torus::head::Journal> journal;
  static std::atomic<bool> journal_lost{false};  // the journal's keep-alive thread may set it until exit
  const std::string state_dir = flags.state_dir.empty() ? flags.session_dir + "/state" : flags.state_dir;
  // The cluster's token is part of its state: a head brought back on a state directory keeps the token its agents
  // and workers hold.
  std::string token_path = flags.token_file.empty() ? flags.session_dir + "/token" : flags.token_file;
  const std::string state_token = state_dir + "/token";
  if (!flags.no_journal && !std::filesystem::exists(token_path, ec) && std::filesystem::exists(state_token, ec)) {
    std::filesystem::copy_file(state_token, token_path, ec);
    if (ec) {
      spdlog::error("cannot copy {} to {}: {}", state_token, token_path, ec.message());
      return 1;
    }
  }
  auto token = torus::rpc::LoadOrCreateTokenFile(token_path);
  if (!token.ok()) {
    spdlog::error("{}", token.status().ToString());
    return 1;
  }
  if (flags.no_journal) {
    journal = torus::head::NewNullJournal();
    spdlog::warn("the journal is off (--no-journal): a restart of this head forgets its state");
  } else if (!flags.state_store.empty()) {
    auto target = torus::head::ParseEtcdTarget(flags.state_store);
    if (!target.ok()) {
      spdlog::error("{}", std::string(target.status().message()));
      return 1;
    }
    torus::head::EtcdJournalOptions options{
        .lease_ttl = std::chrono::seconds(flags.state_store_lease_s),
        // Another head took the journal: this one steps down (and its supervisor may start it again, as a standby).
        .on_lost = [](const std::string& why) {
          spdlog::critical("{}: stepping down", why);
          journal_lost = true;
          kill(getpid(), SIGTERM);
        }};
    auto opened = torus::head::OpenEtcdJournal(*target, options);
    bool told = false;
    while (flags.standby && !opened.ok() && opened.status().code() == absl::StatusCode::kFailedPrecondition) {
      if (!told) spdlog::info("standing by: {}", std::string(opened.status().message()));
      told = true;
      // Until the holder's key goes (watched), a second at a time so that a signal is heard.
      absl::Status waited = torus::head::WaitForJournalRelease(*target, std::chrono::seconds(1));
      if (const int signal_number = torus::PollTerminationSignal(0); signal_number != 0) {
        spdlog::info("signal {} while standing by: exiting", signal_number);
        return 0;
      }
      // etcd unreachable: not a tight loop.
      if (!waited.ok() && waited.code() != absl::StatusCode::kDeadlineExceeded && torus::PollTerminationSignal(1000)) {
        return 0;
      }
      opened = torus::head::OpenEtcdJournal(*target, options);
    }
    if (!opened.ok()) {
      spdlog::error("cannot open the journal at {}: {}", flags.state_store, std::string(opened.status().message()));
      return 1;
    }
    if (told) spdlog::info("took the journal at {}: leading", flags.state_store);
    journal = *std::move(opened);
  } else {
    auto opened = torus::head::OpenSqliteJournal(
        state_dir, flags.journal_sync == "full" ? torus::head::JournalSync::kFull : torus::head::JournalSync::kNormal);
    if (!opened.ok()) {
      spdlog::error("{}", std::string(opened.status().message()));
      return 1;
    }
    journal = *std::move(opened);
    if (!std::filesystem::exists(state_token, ec)) {
      std::filesystem::copy_file(token_path, state_token, ec);
      std::filesystem::permissions(state_token, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::replace, ec);
    }
  }
  torus::head::StateStore store(std::move(journal), clock.WallMillis(), {.compact_after = static_cast<uint64_t>(flags.compact_after)});
  auto recovery = store.Open();
  if (!recovery.ok()) {
    spdlog::error("cannot recover the head's state: {}", std::string(recovery.status().message()));
    return 1;
  }
  const size_t recovered = store.Read([](const torus::head::ClusterState& s) {
    return s.nodes().size() + s.groups().size() + s.jobs().size() + s.runs().size();
  });
  spdlog::info("state from {}: epoch {}, {}{} records replayed in {:.1f} ms ({} nodes, groups, jobs and runs)",
               store.journal_location(), recovery->epoch, recovery->snapshot ? "a snapshot and " : "",
               recovery->records, recovery->micros / 1000.0, recovered);

  // What drivers, the CLI, workers and the session files are given: never a wildcard bind address.
  const std::string advertised = torus::rpc::AdvertisedHost(flags.host, flags.advertise_host);
  // TLS: the cluster CA, the head's certificate and the join token; agents and clients then talk TLS only.
  std::unique_ptr<torus::head::ClusterAuthority> authority;
  if (flags.UseTls()) {
    torus::head::AuthorityOptions options{.dir = (flags.no_journal ? flags.session_dir : state_dir) + "/tls",
                                          .ca_cert_file = flags.tls_ca,
                                          .ca_key_file = flags.tls_ca_key,
                                          .head_hosts = {advertised, flags.host},
                                          .node_validity_s = flags.node_cert_validity_s,
                                          .head_validity_s = flags.node_cert_validity_s,
                                          .join_token_ttl_s = flags.join_token_ttl_s,
                                          .join_token_file = flags.join_token_file};
    for (absl::string_view san : absl::StrSplit(flags.tls_san, ',', absl::SkipEmpty())) {
      options.head_hosts.emplace_back(san);
    }
    auto opened = torus::head::ClusterAuthority::Open(std::move(options), &clock);
    if (!opened.ok()) {
      spdlog::error("TLS: {}", std::string(opened.status().message()));
      return 1;
    }
    authority = *std::move(opened);
    if (absl::Status s = authority->Publish(flags.session_dir); !s.ok()) {
      spdlog::error("cannot write the CA and the join token into {}: {}", flags.session_dir, std::string(s.message()));
      return 1;
    }
  } else {
    std::filesystem::remove(flags.session_dir + "/ca.crt", ec);
    std::filesystem::remove(flags.session_dir + "/join_token", ec);
  }
  if (!authority && !torus::head::IsLoopbackHost(flags.host)) {
    spdlog::warn("serving in plaintext on {}, not a loopback address (--plaintext): the cluster token and every "
                 "request cross the network in clear text, and any holder of the token can act as a node "
                 "(docs/security.md)",
                 flags.host);
  }
  torus::head::NodeCallers node_callers(*token, authority != nullptr);
  store.Read([&node_callers](const torus::head::ClusterState& s) {
    for (const auto& [id, revoked] : s.revoked_nodes()) node_callers.Revoke(id.str());
  });
  torus::head::Liveness liveness(&clock);
  torus::head::GrpcAgentPool agents(
      *token, std::chrono::milliseconds(flags.agent_rpc_timeout_ms),
      authority ? torus::tls::ChannelCredentials(authority->head_files(), torus::tls::kNodeIdentityPrefix) : nullptr);
  // The autoscaler, with --autoscaler-config: whole slices launched for waiting groups and removed when idle.
  std::unique_ptr<torus::head::SliceProvider> slice_provider;
  std::unique_ptr<torus::head::Autoscaler> autoscaler;
  if (!flags.autoscaler_config.empty()) {
    std::ifstream in(flags.autoscaler_config);
    std::stringstream text;
    text << in.rdbuf();
    auto config = torus::autoscale::ParseAutoscalerConfig(text.str());
    if (!in || !config.ok()) {
      spdlog::error("--autoscaler-config {}: {}", flags.autoscaler_config,
                    in ? std::string(config.status().message()) : "cannot read it");
      return 2;
    }
    if (config->provider == torus::autoscale::ProviderKind::kLocal) {
      slice_provider = std::make_unique<torus::head::LocalProvider>(config->local_session, "");
    } else {
      // Pods join with the CA and join token of the provider's tls_secret: the head must issue with that CA and
      // accept that join token, not ones of its own making.
      config->kubernetes.tls = authority != nullptr;
      if (authority && (flags.tls_ca.empty() || flags.join_token_file.empty())) {
        spdlog::error("--autoscaler-config {}: the kubernetes provider's pods join a TLS head with the CA and join "
                      "token of the Secret {}; start the head with --tls-ca, --tls-ca-key and --join-token-file from "
                      "that Secret (`torus tls init`, docs/gke.md), or --plaintext",
                      flags.autoscaler_config, config->kubernetes.tls_secret);
        return 2;
      }
      auto kubernetes = torus::head::KubernetesSliceProvider::Create(config->kubernetes, &clock);
      if (!kubernetes.ok()) {
        spdlog::error("--autoscaler-config {}: {}", flags.autoscaler_config,
                      std::string(kubernetes.status().message()));
        return 2;
      }
      slice_provider = *std::move(kubernetes);
    }
    autoscaler = std::make_unique<torus::head::Autoscaler>(*std::move(config), &store, &liveness, slice_provider.get(),
                                                           &clock, RandomSliceSuffix,
                                                           torus::head::Autoscaler::Options{});
  }
  torus::head::PlacementScheduler scheduler(&store, &liveness, &agents, &clock,
                                            {.prepare_ttl_ms = flags.prepare_ttl_ms});
  // Chips or CPUs that task leases give back may let a waiting group be placed.
  liveness.OnLeasesChanged([&scheduler] { scheduler.Wake(); });
  if (autoscaler) {
    autoscaler->OnNotesChanged([&scheduler] { scheduler.Wake(); });
    scheduler.SetAutoscaling({.note = [&autoscaler](const torus::head::GroupId& g) { return autoscaler->NoteFor(g); },
                              .draining = [&autoscaler](const torus::sched::NodeSnapshot& n) {
                                return autoscaler->Draining(n);
                              }});
  }
  // Each calls the other: the autoscaler's thread stops before the scheduler goes, and the autoscaler outlives it.
  struct StopAutoscalerFirst {
    torus::head::Autoscaler* autoscaler;
    ~StopAutoscalerFirst() {
      if (autoscaler != nullptr) autoscaler->Stop();
    }
  } stop_autoscaler_first{autoscaler.get()};
  torus::head::Membership membership(&store, &liveness, &scheduler, &clock, flags.node_timeout_ms * 1000);
  // An agent finds a restarted head within its gRPC reconnect backoff (at most 1 s, torus-node) and a heartbeat
  // period; until then its silence does not count.
  membership.RestoreLiveness((1000 + flags.heartbeat_period_ms) * 1000);
  // Uploaded packages live beside the journal (and go with it); with no journal, in the session.
  torus::head::PackageStore packages(
      &store, &clock, (flags.no_journal ? flags.session_dir : state_dir) + "/packages",
      {.max_bytes = static_cast<uint64_t>(flags.package_max_bytes),
       .unused_grace_ms = flags.package_unused_grace_s * 1000});
  if (absl::Status s = packages.Open(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 1;
  }
  torus::head::PlacementService groups(&store, &scheduler, &ids, &clock);
  torus::head::JobService jobs(&store, &scheduler, &agents, &ids, &clock);
  torus::head::RunService runs(&store, &scheduler, &agents, &ids, &clock);
  torus::head::WorkloadDriver driver(&store, &liveness, &scheduler, &agents, &clock,
                                     {.head_host = advertised,
                                      .token = *token,
                                      .python_path = flags.python_path,
                                      .run_stop_grace_ms = flags.stop_grace_ms,
                                      .failure_window_ms = flags.failure_window_ms >= 0
                                                               ? flags.failure_window_ms
                                                               : flags.node_timeout_ms + 1000});
  // Services: the controller keeps their replicas (gang runs); the ingress routes requests to the READY ones.
  torus::serve::RouteTable routes;
  torus::head::ServiceController services(&store, &runs, &ids, &routes, &clock, {});
  torus::serve::Ingress ingress(&routes, {.host = flags.host, .port = *flags.serve_port});
  std::string ingress_url;
  torus::head::Histogram placement_latency(torus::head::PlacementLatencyBounds());
  store.Subscribe([&scheduler](const std::vector<torus::head::Record>& records) { scheduler.OnRecords(records); });
  store.Subscribe([&node_callers](const std::vector<torus::head::Record>& records) { node_callers.OnRecords(records); });
  store.Subscribe([&driver](const std::vector<torus::head::Record>& records) { driver.OnRecords(records); });
  store.Subscribe([&services](const std::vector<torus::head::Record>& records) { services.OnRecords(records); });
  if (autoscaler) {
    store.Subscribe([&autoscaler](const std::vector<torus::head::Record>& records) { autoscaler->OnRecords(records); });
  }
  store.Subscribe([&store, &placement_latency](const std::vector<torus::head::Record>& records) {
    for (const torus::head::Record& r : records) {
      const auto* placed = std::get_if<torus::head::GroupPlaced>(&r);
      if (placed == nullptr) continue;
      auto seconds = store.Read([&](const torus::head::ClusterState& s) -> std::optional<double> {
        const torus::head::Group* g = s.FindGroup(placed->group);
        return g == nullptr ? std::nullopt : torus::head::PlacementLatencySeconds(*g);
      });
      if (seconds) placement_latency.Observe(*seconds);
    }
  });
  torus::head::EventLog events(recovery->epoch, 100'000);
  store.Subscribe([&store, &events](const std::vector<torus::head::Record>& records) {
    events.Append(store.Read([&records](const torus::head::ClusterState& s) {
      return torus::head::EventsFromRecords(records, [&s](const torus::head::WorkerId& id) {
        const torus::head::Worker* w = s.FindWorker(id);
        return w == nullptr ? torus::head::Owner{} : w->owner;
      });
    }));
  });
  torus::head::MetricsStore metrics({.retention_ms = flags.metrics_retention_s * 1000,
                                     .max_points = flags.metrics_max_points},
                                    clock.WallMillis());
  store.StartDispatch();
  scheduler.Start();
  if (autoscaler) autoscaler->Start();
  std::string cluster_id = token->substr(0, 12);
  torus::head::HeadServiceImpl service(
      &store, &membership, &liveness, &groups, &clock,
      {.token = *token,
       .node_callers = &node_callers,
       .cluster_id = cluster_id,
       .heartbeat_period_ms = flags.heartbeat_period_ms});

  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(flags.host, ":", flags.port),
                           authority ? torus::tls::ServerCredentials(authority->head_files())
                                     : grpc::InsecureServerCredentials(),
                           &bound_port);
  std::unique_ptr<torus::head::NodeAdmissionServiceImpl> admission;
  if (authority) {
    admission = std::make_unique<torus::head::NodeAdmissionServiceImpl>(authority.get(), &store, *token);
    builder.RegisterService(admission.get());
  }
  // Heartbeat datagrams on the gRPC port's number over UDP (agents learn the port when they register).
  std::unique_ptr<torus::head::BeatServer> beats;
  if (!flags.no_heartbeat_datagrams) {
    const int wanted = flags.heartbeat_port >= 0 ? flags.heartbeat_port : flags.port;
    auto bound = torus::head::BeatServer::Bind(flags.host, wanted, &liveness, &node_callers);
    if (!bound.ok() && flags.heartbeat_port < 0 && wanted != 0) {
      spdlog::warn("{}; taking any free UDP port instead (agents learn it when they register; a firewall or "
                   "Service that passes only UDP {} keeps them on their streams)",
                   std::string(bound.status().message()), wanted);
      bound = torus::head::BeatServer::Bind(flags.host, 0, &liveness, &node_callers);
    }
    if (!bound.ok()) {
      spdlog::error("{} (--heartbeat-port chooses another port; --no-heartbeat-datagrams does without)",
                    std::string(bound.status().message()));
      return 1;
    }
    beats = *std::move(bound);
    beats->Start();
    service.SetBeatServer(beats.get());
    spdlog::info("heartbeat datagrams on UDP {}:{}", flags.host, beats->port());
  }
  service.SetMetricsStore(&metrics);
  service.SetPackageStore(&packages);
  torus::head::ActorDirectory actors(&store, &clock);
  service.SetActorDirectory(&actors);
  // Detached actors are owned here (served as their owner on this port; started once it answers).
  torus::head::DetachedActors detached(&actors, {.token = *token,
                                                 .tls_ca = authority ? authority->head_files().ca : "",
                                                 .recover_delay_ms = 1000 + flags.heartbeat_period_ms});
  service.SetDetachedActors(&detached);
  torus::head::TaskTable tasks({.max_tasks = 10'000});
  service.SetTaskTable(&tasks);
  // The actors and tasks of an owner that is gone end: each owner is asked every 2 s; three failed probes in a row.
  torus::head::OwnerMonitor owner_monitor(
      [&actors, &tasks] {
        std::set<std::string> owners = tasks.LiveOwners();
        for (const auto& [owner, ids] : actors.LiveByOwner()) owners.insert(owner);
        return owners;
      },
      [&actors, &tasks, &clock](const std::string& owner, const std::string& cause) {
        return actors.OwnerGone(owner, cause) + tasks.OwnerGone(owner, cause, clock.WallMillis());
      },
      torus::head::GrpcOwnerProbe(*token, std::chrono::seconds(2),
                                  authority ? torus::tls::ChannelCredentials({.ca = authority->head_files().ca}, "")
                                            : nullptr),
      std::chrono::seconds(2));
  builder.RegisterService(&service);
  torus::head::EventServiceImpl event_service(&events, *token);
  builder.RegisterService(&event_service);
  builder.RegisterService(detached.service());
  builder.SetMaxReceiveMessageSize(16 << 20);
  // Agents ping every 2 s on their heartbeat streams; the head pings idle connections every 30 s so that the
  // streams of vanished agents end.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  torus::head::RequestCounter grpc_requests;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<torus::head::GrpcCountingInterceptorFactory>(
      &grpc_requests, std::vector<std::string>{"torus.rpc.HeadService"}));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  torus::head::HeartbeatStreamServer heartbeat_streams(&service, &liveness, &node_callers, beats.get(), builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error("cannot listen on {}:{} (in use, or not a local address?)", flags.host, flags.port);
    return 1;
  }
  heartbeat_streams.Start();
  std::string address = absl::StrCat(advertised, ":", bound_port);
  // The head reads nodes and groups for its actors through its own API (loopback when it listens on every address).
  const bool wildcard = flags.host == "0.0.0.0" || flags.host == "::" || flags.host == "[::]";
  detached.Start(absl::StrCat(wildcard ? "127.0.0.1" : flags.host, ":", bound_port), address);
  // Jobs, and clients that read the session's head_address, are given every head so that they follow the leader.
  const std::string cluster_address = flags.head_addresses.empty() ? address : flags.head_addresses;
  driver.SetHeadAddress(cluster_address);
  torus::head::HttpApi http(&store, &liveness, &clock, *token, cluster_id);
  http.SetReadOnly(flags.dashboard_read_only);
  http.SetMetricsStore(&metrics);
  // Package uploads are the largest bodies (streamed to a file; their route enforces the package limit itself).
  http.SetMaxBodyBytes(static_cast<size_t>(std::max<int64_t>(flags.package_max_bytes, int64_t{64} << 20)));
  http.AddRoutes([&packages, &store](httplib::Server& server) {
    torus::head::RegisterPackageRoutes(server, &packages, &store);
  });
  http.AddRoutes([&metrics, &store, &agents, &clock](httplib::Server& server) {
    torus::head::RegisterMetricsRoutes(server, &metrics, &store, &agents, &clock);
  });
  http.AddRoutes([&jobs, &events, &flags](httplib::Server& server) {
    torus::head::RegisterJobRoutes(server, &jobs, &events,
                                   {.session_name = std::filesystem::path(flags.session_dir).filename().string()});
    torus::head::RegisterLogTailRoute(server, &jobs, &events);
  });
  http.AddRoutes([&runs](httplib::Server& server) { torus::head::RegisterRunRoutes(server, &runs); });
  http.AddRoutes([&events](httplib::Server& server) { torus::head::RegisterEventRoutes(server, &events); });
  http.AddRoutes([&actors, &tasks](httplib::Server& server) {
    torus::head::RegisterActorRoutes(server, &actors);
    torus::head::RegisterTaskRoutes(server, &tasks);
  });
  http.AddRoutes([](httplib::Server& server) { torus::head::AddDashboardRoutes(server); });
  http.AddRoutes([&autoscaler, &store](httplib::Server& server) {
    torus::head::RegisterAutoscalerRoutes(server, autoscaler.get(), &store);
  });
  if (autoscaler) {
    http.AddMetricsSource([&autoscaler](torus::head::PrometheusWriter& w) {
      torus::head::WriteAutoscalerMetrics(w, autoscaler->GetStatus());
    });
  }
  http.AddRoutes([&services, &ingress_url](httplib::Server& server) {
    torus::head::RegisterServiceRoutes(server, &services, &ingress_url);
  });
  http.AddMetricsSource([&services, &routes](torus::head::PrometheusWriter& w) {
    torus::head::WriteServiceMetrics(w, services.List(), routes.Counters());
  });
  http.AddMetricsSource([&beats, &heartbeat_streams](torus::head::PrometheusWriter& w) {
    w.Family("torus_heartbeat_stream_messages_total", "counter",
             "Heartbeats taken on agents' streams (first beats, changes, and beats while datagrams go unanswered).");
    w.Sample("torus_heartbeat_stream_messages_total", {}, static_cast<double>(heartbeat_streams.messages()));
    if (!beats) return;
    const torus::head::BeatServer::Counts counts = beats->counts();
    w.Family("torus_heartbeat_datagrams_total", "counter",
             "Heartbeat datagrams by outcome: ok (a node heard), reregister (an incarnation the head does not know), "
             "refused (revoked), dropped (malformed, unknown node, wrong key or incarnation, replayed, no open "
             "stream).");
    w.Sample("torus_heartbeat_datagrams_total", {{"outcome", "ok"}}, static_cast<double>(counts.ok));
    w.Sample("torus_heartbeat_datagrams_total", {{"outcome", "reregister"}}, static_cast<double>(counts.reregister));
    w.Sample("torus_heartbeat_datagrams_total", {{"outcome", "refused"}}, static_cast<double>(counts.refused));
    w.Sample("torus_heartbeat_datagrams_total", {{"outcome", "dropped"}}, static_cast<double>(counts.dropped));
  });
  http.AddMetricsSource([&jobs, &runs](torus::head::PrometheusWriter& w) {
    w.Family("torus_jobs", "gauge", "Jobs by status.");
    for (const auto& [status, count] : jobs.CountByStatus()) w.Sample("torus_jobs", {{"status", status}}, count);
    w.Family("torus_runs", "gauge", "Gang runs by status.");
    for (const auto& [status, count] : runs.CountByStatus()) w.Sample("torus_runs", {{"status", status}}, count);
    w.Family("torus_gang_restarts_total", "counter", "Failed attempts of gang runs (each one restarted the gang).");
    w.Sample("torus_gang_restarts_total", {}, static_cast<double>(runs.TotalRestarts()));
    w.Family("torus_gang_failures", "gauge", "Failed attempts of gang runs, by the kind of their root cause.");
    for (const auto& [cause, count] : runs.FailedAttemptsByCause()) {
      w.Sample("torus_gang_failures", {{"cause", cause}}, count);
    }
    const auto goodputs = runs.Goodputs();
    w.Family("torus_run_goodput_ratio", "gauge", "A gang run's productive time over its wall time.");
    for (const auto& g : goodputs) {
      w.Sample("torus_run_goodput_ratio", {{"run_id", g.run_id}, {"name", g.name}}, g.goodput.ratio);
    }
    w.Family("torus_run_time_seconds", "gauge",
             "A gang run's wall time by part: queued, startup, productive, lost, restart (they sum to its wall time).");
    for (const auto& g : goodputs) {
      for (const auto& [part, ms] : {std::pair<const char*, int64_t>{"queued", g.goodput.queued_ms},
                                     {"startup", g.goodput.startup_ms},
                                     {"productive", g.goodput.productive_ms},
                                     {"lost", g.goodput.lost_ms},
                                     {"restart", g.goodput.restart_ms}}) {
        w.Sample("torus_run_time_seconds", {{"run_id", g.run_id}, {"name", g.name}, {"part", part}},
                 static_cast<double>(ms) / 1000.0);
      }
    }
  });
  http.AddMetricsSource([&actors, &tasks](torus::head::PrometheusWriter& w) {
    std::map<std::string, int64_t> by_state = {{"PENDING_CREATION", 0}, {"ALIVE", 0}, {"RESTARTING", 0}, {"DEAD", 0}};
    for (const torus::head::Actor& a : actors.List({})) ++by_state[torus::head::ActorStateName(a.state)];
    w.Family("torus_actors", "gauge", "Actors of the head's directory by state (the dead ones it keeps).");
    for (const auto& [state, count] : by_state) w.Sample("torus_actors", {{"state", state}}, static_cast<double>(count));
    w.Family("torus_tasks", "gauge", "Tasks reported since the head started, by state (their owners report them).");
    for (const auto& [state, count] : tasks.CountsByState()) {
      w.Sample("torus_tasks", {{"state", state}}, static_cast<double>(count));
    }
  });
  http.AddMetricsSource([&placement_latency, &grpc_requests, &metrics, &clock](torus::head::PrometheusWriter& w) {
    w.Family("torus_placement_latency_seconds", "histogram",
             "Time from a placement group's submission (or loss of a bundle) until it is CREATED.");
    placement_latency.Write(w, "torus_placement_latency_seconds");
    w.Family("torus_grpc_requests_total", "counter", "gRPC calls the head answered, by method and status code.");
    for (const auto& [key, count] : grpc_requests.Counts()) {
      w.Sample("torus_grpc_requests_total", {{"method", key.first}, {"code", key.second}}, static_cast<double>(count));
    }
    const torus::head::MetricsStoreStats stats = metrics.Stats();
    w.Family("torus_metrics_store_series", "gauge", "Time series held by the head's metrics store.");
    w.Sample("torus_metrics_store_series", {}, static_cast<double>(stats.series));
    w.Family("torus_metrics_reports_total", "counter", "Metrics reports received from agents.");
    w.Sample("torus_metrics_reports_total", {}, static_cast<double>(stats.reports));
    torus::head::WriteNodeMetrics(w, metrics, clock.WallMillis());
  });
  if (*flags.serve_port >= 0) {
    auto serve_port = ingress.Start();
    if (!serve_port.ok()) {
      spdlog::error("{} (is --serve-port in use? -1 runs no ingress)", std::string(serve_port.status().message()));
      return 1;
    }
    ingress_url = absl::StrCat("http://", advertised, ":", *serve_port);
    if (!WriteFileAtomically(flags.session_dir + "/serve_address", absl::StrCat(advertised, ":", *serve_port, "\n"))) {
      spdlog::error("cannot write the serve address into {}", flags.session_dir);
      return 1;
    }
    spdlog::info("ingress listening on {}", ingress_url);
  }
  if (authority) http.SetTls(authority->head_files());
  auto http_port = http.Start(flags.host, flags.dashboard_port);
  if (!http_port.ok()) {
    spdlog::error("{} (is --dashboard-port in use?)", std::string(http_port.status().message()));
    return 1;
  }
  std::string http_address = absl::StrCat(advertised, ":", *http_port);
  // Workers report to this head, or to another that leads after it.
  const std::string scheme = authority ? "https://" : "http://";
  std::string report_bases = scheme + http_address;
  for (absl::string_view other : absl::StrSplit(flags.head_dashboard_addresses, ',', absl::SkipEmpty())) {
    if (other != http_address) absl::StrAppend(&report_bases, ",", scheme, other);
  }
  driver.SetReportBaseUrl(report_bases);
  service.SetHttpAddress(http_address);
  driver.Start();
  services.Start();
  owner_monitor.Start();
  packages.StartCollector(std::clamp<int64_t>(flags.package_unused_grace_s * 1000 / 2, 100, 10'000));
  if (!WriteFileAtomically(flags.session_dir + "/dashboard_address", http_address + "\n") ||
      !WriteFileAtomically(flags.session_dir + "/head_address", cluster_address + "\n")) {
    spdlog::error("cannot write addresses into {}", flags.session_dir);
    return 1;
  }
  spdlog::info("torus-head {} listening on {} (gRPC{}) and {}{} (cluster {}, node timeout {} ms)", getpid(), address,
               authority ? " over TLS, node certificates required" : ", plaintext", scheme, http_address, cluster_id,
               flags.node_timeout_ms);

  auto check_period = std::chrono::microseconds(std::clamp<int64_t>(flags.node_timeout_ms * 100, 10'000, 100'000));
  torus::head::FailureDetector detector(&membership, check_period);
  detector.Start();
  // The head's own certificate is renewed in place (servers and channels watch its files).
  if (authority) authority->StartRenewal();

  const int signal_number = torus::WaitForTerminationSignal();
  if (authority) authority->Stop();
  spdlog::info("signal {}: shutting down", signal_number);
  detector.Stop();
  owner_monitor.Stop();
  detached.Stop();  // their workers keep running: the next head takes them up
  packages.StopCollector();
  events.Close();  // ends the event streams, which hold HTTP threads
  routes.Stop();  // requests waiting for a replica end now
  ingress.Stop();
  services.Stop();
  http.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  heartbeat_streams.Stop();
  driver.Stop();
  if (autoscaler) autoscaler->Stop();  // the slices it launched keep running: the next head takes them up
  scheduler.Stop();
  store.StopDispatch();
  return journal_lost ? 1 : 0;  // stepped down: not a clean stop
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil with mutex deadlock detection on; it graphs every lock gRPC takes per call, a few percent of
  // the head's CPU under load. The head's lock order is fixed by construction, so the graph is not kept.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Termination signals are taken by Run; block them before any thread starts.
  torus::BlockTerminationSignals();

  HeadFlags flags;
  if (std::optional<int> exit_code = ParseHeadFlags(argc, argv, &flags)) return *exit_code;
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  return Run(flags);
}
