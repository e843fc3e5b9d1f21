#include "torus/head/state/codec.h"

#include <algorithm>
#include <functional>
#include <map>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

using nlohmann::json;

// std::optional as null-or-value (this nlohmann has no built-in support).
namespace nlohmann {
template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) {
    if (v) {
      j = *v;
    } else {
      j = nullptr;
    }
  }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null()) {
      v.reset();
    } else {
      v = j.get<T>();
    }
  }
};
}  // namespace nlohmann

// Like nlohmann's NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE, but a missing or mistyped field is an error that names it:
// `group: [json.exception.out_of_range.403] key 'group' not found`.
template <typename T>
void TorusGetField(const json& j, const char* name, T& value) {
  try {
    j.at(name).get_to(value);
  } catch (const std::exception& e) {
    throw std::invalid_argument(absl::StrCat(name, ": ", e.what()));
  }
}
#define TORUS_JSON_FROM(field) TorusGetField(nlohmann_json_j, #field, nlohmann_json_t.field);
#define TORUS_JSON_FIELDS(Type, ...)                                                                   \
  inline void to_json(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) {                 \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))                           \
  }                                                                                                    \
  inline void from_json(const nlohmann::json& nlohmann_json_j, Type& nlohmann_json_t) {               \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(TORUS_JSON_FROM, __VA_ARGS__))                            \
  }

// A type some of whose fields came later: `(a, b, ...)` must be present, `(c, d, ...)` are read when present (a
// journal written before them has none).
#define TORUS_JSON_FROM_IF_PRESENT(field) \
  if (nlohmann_json_j.contains(#field)) TorusGetField(nlohmann_json_j, #field, nlohmann_json_t.field);
#define TORUS_JSON_UNPAREN(...) __VA_ARGS__
#define TORUS_JSON_FIELDS_AND_LATER(Type, required, later)                                                         \
  inline void to_json(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) {                                \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, TORUS_JSON_UNPAREN required))                        \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, TORUS_JSON_UNPAREN later))                           \
  }                                                                                                                 \
  inline void from_json(const nlohmann::json& nlohmann_json_j, Type& nlohmann_json_t) {                              \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(TORUS_JSON_FROM, TORUS_JSON_UNPAREN required))                         \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(TORUS_JSON_FROM_IF_PRESENT, TORUS_JSON_UNPAREN later))                 \
  }

// Enums by name; an unknown name is an error (nlohmann's own enum macro would take the first value).
#define TORUS_JSON_ENUM(Type, ...)                                                                     \
  inline const std::vector<std::pair<Type, const char*>>& Type##Names() {                              \
    static const auto* names = new std::vector<std::pair<Type, const char*>>(__VA_ARGS__);            \
    return *names;                                                                                     \
  }                                                                                                    \
  inline void to_json(nlohmann::json& j, const Type& v) {                                              \
    for (const auto& [value, name] : Type##Names()) {                                                  \
      if (value == v) {                                                                                \
        j = name;                                                                                      \
        return;                                                                                        \
      }                                                                                                \
    }                                                                                                  \
    j = nullptr;                                                                                       \
  }                                                                                                    \
  inline void from_json(const nlohmann::json& j, Type& v) {                                            \
    const std::string text = j.get<std::string>();                                                     \
    for (const auto& [value, name] : Type##Names()) {                                                  \
      if (text == name) {                                                                              \
        v = value;                                                                                     \
        return;                                                                                        \
      }                                                                                                \
    }                                                                                                  \
    throw std::invalid_argument(absl::StrCat("\"", text, "\" is not a ", #Type));                   \
  }

namespace torus {

void to_json(json& j, const ResourceSet& r) {
  j = json::object();
  for (const auto& [name, amount] : r.amounts()) j[name] = amount;
}
void from_json(const json& j, ResourceSet& r) {
  r = ResourceSet();
  for (const auto& [name, amount] : j.items()) r.SetFixed(name, amount.get<int64_t>());
}

void to_json(json& j, const LabelSelector& s) { j = s.ToString(); }
void from_json(const json& j, LabelSelector& s) {
  auto parsed = LabelSelector::ParseJson(j.get<std::string>());
  if (!parsed.ok()) throw std::invalid_argument(std::string(parsed.status().message()));
  s = *std::move(parsed);
}

void to_json(json& j, const TpuGeneration& g) { j = std::string(GetGenerationInfo(g).accelerator_type); }
void from_json(const json& j, TpuGeneration& g) {
  auto parsed = ParseAcceleratorType(j.get<std::string>());
  if (!parsed.ok()) throw std::invalid_argument(std::string(parsed.status().message()));
  g = *parsed;
}

void to_json(json& j, const Topology& t) { j = t.dims; }
void from_json(const json& j, Topology& t) { t.dims = j.get<std::vector<int>>(); }

namespace sched {

TORUS_JSON_ENUM(Strategy, {{Strategy::kPack, "PACK"},
                                        {Strategy::kSpread, "SPREAD"},
                                        {Strategy::kStrictPack, "STRICT_PACK"},
                                        {Strategy::kStrictSpread, "STRICT_SPREAD"}})
TORUS_JSON_ENUM(BundleUnit, {{BundleUnit::kHost, "host"}, {BundleUnit::kChip, "chip"}})
TORUS_JSON_FIELDS(BundleAlternative, bundles, bundle_selectors)
TORUS_JSON_FIELDS(BundleRequest, primary, fallbacks, strategy, fixed)
TORUS_JSON_FIELDS(SliceShapeRequest, generation, topology, num_slices, chips_per_host,
                                                selector)
TORUS_JSON_FIELDS(SliceGroupRequest, primary, fallbacks, unit, resources_per_bundle,
                                                keep_slices)

}  // namespace sched

namespace head {

template <typename Tag>
void to_json(json& j, const Id<Tag>& id) {
  j = id.str();
}
template <typename Tag>
void from_json(const json& j, Id<Tag>& id) {
  id = Id<Tag>(j.get<std::string>());
}

TORUS_JSON_ENUM(NodeState, {{NodeState::kAlive, "ALIVE"}, {NodeState::kDead, "DEAD"}})
TORUS_JSON_ENUM(PgState, {{PgState::kPending, "PENDING"},
                                       {PgState::kCreated, "CREATED"},
                                       {PgState::kRescheduling, "RESCHEDULING"},
                                       {PgState::kRemoved, "REMOVED"},
                                       {PgState::kFailed, "FAILED"}})
TORUS_JSON_ENUM(PgKind, {{PgKind::kBundles, "bundles"}, {PgKind::kSlices, "slices"}})
TORUS_JSON_ENUM(OwnerKind, {{OwnerKind::kNone, ""}, {OwnerKind::kJob, "job"}, {OwnerKind::kRun, "run"}})
TORUS_JSON_ENUM(WorkerPhase, {{WorkerPhase::kStarting, "STARTING"},
                                           {WorkerPhase::kRunning, "RUNNING"},
                                           {WorkerPhase::kExited, "EXITED"}})
TORUS_JSON_ENUM(ActorState, {{ActorState::kPendingCreation, "PENDING_CREATION"},
                             {ActorState::kAlive, "ALIVE"},
                             {ActorState::kRestarting, "RESTARTING"},
                             {ActorState::kDead, "DEAD"}})
TORUS_JSON_ENUM(JobStatus, {{JobStatus::kPending, "PENDING"},
                                         {JobStatus::kRunning, "RUNNING"},
                                         {JobStatus::kStopped, "STOPPED"},
                                         {JobStatus::kSucceeded, "SUCCEEDED"},
                                         {JobStatus::kFailed, "FAILED"}})
TORUS_JSON_ENUM(RunStatus, {{RunStatus::kPending, "PENDING"},
                                         {RunStatus::kRunning, "RUNNING"},
                                         {RunStatus::kRestarting, "RESTARTING"},
                                         {RunStatus::kSucceeded, "SUCCEEDED"},
                                         {RunStatus::kFailed, "FAILED"},
                                         {RunStatus::kStopped, "STOPPED"}})

TORUS_JSON_FIELDS(NodeRegistration, node_id, address, hostname, total, labels, pid,
                                                start_time_ms, agent_port)
TORUS_JSON_FIELDS(Node, info, state, incarnation, registered_wall_ms, died_wall_ms,
                                                death_reason)
TORUS_JSON_FIELDS(Owner, kind, id)
TORUS_JSON_FIELDS(HeldBundle, index, ledger_index, node, ledger_group, attempt,
                                                slice_name, worker_id, chips, gpus, resources, lost)
TORUS_JSON_FIELDS(PgEvent, time_ms, state, message)
TORUS_JSON_FIELDS(Group, id, name, kind, bundle_request, slice_request, request_text,
                                                owner, seq, state, reason, alternative, bundles, slices, history,
                                                created_wall_ms, timeout_s, placed_once, changes)
TORUS_JSON_ENUM(HostLoss, {{HostLoss::kNone, "NONE"},
                           {HostLoss::kSilent, "SILENT"},
                           {HostLoss::kMarkedDead, "MARKED_DEAD"},
                           {HostLoss::kAgentGone, "AGENT_GONE"}})
TORUS_JSON_FIELDS_AND_LATER(WorkerExit, (exit_code, signal, lost, start_failed, reason, wall_ms),
                            (stopped, oom_killed, peak_rss_bytes, output_tail, accelerator_error, host_loss,
                             host_last_seen_ms))
// py_modules came later: a journal written before it has none.
void to_json(json& j, const JobRequest& r) {
  j = json{{"entrypoint", r.entrypoint},       {"submission_id", r.submission_id}, {"env_vars", r.env_vars},
           {"working_dir", r.working_dir},     {"py_modules", r.py_modules},       {"metadata", r.metadata},
           {"resources", r.resources},         {"label_selector", r.label_selector},
           {"runtime_env_json", r.runtime_env_json}};
}
void from_json(const json& j, JobRequest& r) {
  TorusGetField(j, "entrypoint", r.entrypoint);
  TorusGetField(j, "submission_id", r.submission_id);
  TorusGetField(j, "env_vars", r.env_vars);
  TorusGetField(j, "working_dir", r.working_dir);
  if (j.contains("py_modules")) TorusGetField(j, "py_modules", r.py_modules);
  TorusGetField(j, "metadata", r.metadata);
  TorusGetField(j, "resources", r.resources);
  TorusGetField(j, "label_selector", r.label_selector);
  TorusGetField(j, "runtime_env_json", r.runtime_env_json);
}
TORUS_JSON_FIELDS(Package, name, sha256, size, stored_wall_ms)
TORUS_JSON_FIELDS(WorkerLaunch, owner_tag, argv, env_set, env_unset, cwd, working_dir_package, py_module_packages)
// Launches came later: a journal written before them has none.
TORUS_JSON_FIELDS_AND_LATER(Worker, (id, owner, attempt, rank, node, group, ledger_group, bundle, chips, gpus, phase,
                                     pid, start_wall_ms, exit),
                            (launch))
TORUS_JSON_FIELDS(Job, id, request, status, message, error_type, submit_time_ms,
                                                start_time_ms, end_time_ms, group, worker, exit_code, stop_requested)
TORUS_JSON_FIELDS(RankState, rank, worker, node, address, slice_name, chips, gpus)
TORUS_JSON_FIELDS(StepMetrics, step, metrics_json, time_ms)
TORUS_JSON_FIELDS_AND_LATER(RunAttempt, (number, start_time_ms, end_time_ms, end_reason, checkpoint_dir, ranks, metrics),
                            (cause, end_details, explained, first_report_ms, last_report_ms, kept_until_ms, serve_port))

// A run: its spec in the run-spec JSON form; the plan is derived again on decoding.
void to_json(json& j, const Run& r) {
  j = json{{"id", r.id},
           {"spec", train::RunSpecToJson(r.spec)},
           {"group", r.group},
           {"token", r.token},
           {"status", r.status},
           {"message", r.message},
           {"failures", r.failures},
           {"attempts", r.attempts},
           {"created_time_ms", r.created_time_ms},
           {"end_time_ms", r.end_time_ms},
           {"stop_requested", r.stop_requested},
           {"reports", r.reports},
           {"committed", r.committed}};
  if (!r.service.empty()) {
    j["service"] = r.service;
    j["service_version"] = r.service_version;
  }
}
void from_json(const json& j, Run& r) {
  TorusGetField(j, "id", r.id);
  std::string spec_json;
  TorusGetField(j, "spec", spec_json);
  auto spec = train::RunSpecFromJson(spec_json);
  if (!spec.ok()) throw std::invalid_argument(absl::StrCat("spec: ", spec.status().message()));
  r.spec = *std::move(spec);
  auto plan = train::PlanRun(r.spec);
  if (!plan.ok()) throw std::invalid_argument(absl::StrCat("spec: ", plan.status().message()));
  r.plan = *std::move(plan);
  TorusGetField(j, "group", r.group);
  TorusGetField(j, "token", r.token);
  TorusGetField(j, "status", r.status);
  TorusGetField(j, "message", r.message);
  TorusGetField(j, "failures", r.failures);
  TorusGetField(j, "attempts", r.attempts);
  TorusGetField(j, "created_time_ms", r.created_time_ms);
  TorusGetField(j, "end_time_ms", r.end_time_ms);
  TorusGetField(j, "stop_requested", r.stop_requested);
  TorusGetField(j, "reports", r.reports);
  TorusGetField(j, "committed", r.committed);
  if (j.contains("service")) {
    TorusGetField(j, "service", r.service);
    TorusGetField(j, "service_version", r.service_version);
  }
}

// A service: its spec in the service-spec JSON form, parsed again on decoding.
void to_json(json& j, const Service& s) {
  j = json{{"name", s.name}, {"spec", s.spec_json}, {"version", s.version}, {"created_ms", s.created_ms},
           {"updated_ms", s.updated_ms}};
}
void from_json(const json& j, Service& s) {
  TorusGetField(j, "name", s.name);
  TorusGetField(j, "spec", s.spec_json);
  auto spec = train::ParseServiceSpec(s.spec_json);
  if (!spec.ok()) throw std::invalid_argument(absl::StrCat("spec: ", spec.status().message()));
  s.spec = *std::move(spec);
  TorusGetField(j, "version", s.version);
  TorusGetField(j, "created_ms", s.created_ms);
  TorusGetField(j, "updated_ms", s.updated_ms);
}

TORUS_JSON_FIELDS(HeadStarted, epoch, wall_ms)
TORUS_JSON_FIELDS(NodeRegistered, info, incarnation, wall_ms)
TORUS_JSON_FIELDS(NodeDied, node, incarnation, reason, wall_ms)
TORUS_JSON_FIELDS(NodeRemoved, node, reason, wall_ms)
TORUS_JSON_FIELDS(GroupSubmitted, group)
TORUS_JSON_FIELDS(GroupPlaced, group, alternative, bundles, slices, message, wall_ms)
TORUS_JSON_FIELDS(GroupWaiting, group, reason, wall_ms)
TORUS_JSON_FIELDS(GroupBundlesLost, group, lost_indices, dropped_slices, message, wall_ms)
TORUS_JSON_FIELDS(GroupEnded, group, state, message, wall_ms)
TORUS_JSON_FIELDS(WorkerStarting, worker)
TORUS_JSON_FIELDS(WorkerStarted, worker, pid, wall_ms)
TORUS_JSON_FIELDS(WorkerExited, worker, exit)
TORUS_JSON_FIELDS(JobSubmitted, job)
TORUS_JSON_FIELDS(JobUpdated, job, status, message, error_type, exit_code, wall_ms)
TORUS_JSON_FIELDS(JobStopRequested, job)
TORUS_JSON_FIELDS(JobDeleted, job)
TORUS_JSON_FIELDS_AND_LATER(RunSubmitted, (run, spec_json, token, group, committed, wall_ms),
                            (service, service_version))
TORUS_JSON_FIELDS(ServiceDeployed, name, spec_json, version, wall_ms)
TORUS_JSON_FIELDS(ServiceDeleted, name, wall_ms)
TORUS_JSON_FIELDS(NodeRevoked, node, reason, wall_ms)
TORUS_JSON_FIELDS(AttemptStarted, run, attempt)
TORUS_JSON_FIELDS_AND_LATER(AttemptEnded, (run, number, reason, wall_ms), (cause, details))
TORUS_JSON_FIELDS(AttemptExplained, run, number, cause, reason, details, run_message, wall_ms)
TORUS_JSON_FIELDS(RunFinished, run, status, message, wall_ms)
TORUS_JSON_FIELDS(RunStopRequested, run)
TORUS_JSON_FIELDS(RunReported, run, attempt, rank, step, metrics_json, checkpoint, wall_ms)
TORUS_JSON_FIELDS_AND_LATER(CheckpointCommitted, (run, step, dir, committed), (wall_ms))
TORUS_JSON_FIELDS(PackageStored, package)
TORUS_JSON_FIELDS(PackageRemoved, name, wall_ms)
TORUS_JSON_FIELDS_AND_LATER(Actor,
                            (id, name, ns, class_name, methods, job_id, owner_address, state, node, pid, worker_address,
                             resources, restarts, max_restarts, death_cause, create_time_ms, start_time_ms,
                             end_time_ms),
                            (max_task_retries, detached, creation, lease_agent, lease_id))
TORUS_JSON_FIELDS(ActorRegistered, actor)
TORUS_JSON_FIELDS_AND_LATER(ActorUpdated, (actor, state, node, pid, worker_address, restarts, death_cause, wall_ms),
                            (lease_agent, lease_id))

namespace {

using Decoder = std::function<Record(const json&)>;

template <typename T>
std::pair<std::string, Decoder> Entry() {
  return {std::string(RecordName(Record(T{}))), [](const json& j) { return Record(j.get<T>()); }};
}

const std::map<std::string, Decoder, std::less<>>& Decoders() {
  static const auto* decoders = new std::map<std::string, Decoder, std::less<>>{
      Entry<HeadStarted>(),      Entry<NodeRegistered>(),   Entry<NodeDied>(),          Entry<NodeRemoved>(),
      Entry<GroupSubmitted>(),
      Entry<GroupPlaced>(),      Entry<GroupWaiting>(),     Entry<GroupBundlesLost>(),  Entry<GroupEnded>(),
      Entry<WorkerStarting>(),   Entry<WorkerStarted>(),    Entry<WorkerExited>(),      Entry<JobSubmitted>(),
      Entry<JobUpdated>(),       Entry<JobStopRequested>(), Entry<JobDeleted>(),        Entry<RunSubmitted>(),
      Entry<AttemptStarted>(),   Entry<AttemptEnded>(),     Entry<RunFinished>(),       Entry<RunStopRequested>(),
      Entry<RunReported>(),      Entry<CheckpointCommitted>(), Entry<PackageStored>(),    Entry<PackageRemoved>(),
      Entry<AttemptExplained>(), Entry<ActorRegistered>(), Entry<ActorUpdated>(),
      Entry<ServiceDeployed>(),  Entry<ServiceDeleted>(),   Entry<NodeRevoked>()};
  return *decoders;
}

constexpr int kSnapshotFormat = 2;  // 2: one line of metadata, then one line per entity

}  // namespace

namespace {

json RecordJson(const Record& record) {
  json j = std::visit([](const auto& r) { return json(r); }, record);
  j["type"] = RecordName(record);
  return j;
}

}  // namespace

std::string StateCodec::EncodeRecord(const Record& record) {
  return RecordJson(record).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<std::string> StateCodec::EncodeRecordExact(const Record& record) {
  try {
    return RecordJson(record).dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::type_error&) {
    return std::nullopt;  // text that is not UTF-8
  }
}

absl::StatusOr<Record> StateCodec::DecodeRecord(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("record: not a JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return absl::InvalidArgumentError("record: no \"type\"");
  auto decoder = Decoders().find(type->get<std::string>());
  if (decoder == Decoders().end()) {
    return absl::InvalidArgumentError(absl::StrCat("record: unknown type \"", type->get<std::string>(), "\""));
  }
  try {
    return decoder->second(j);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("record ", type->get<std::string>(), ": ", e.what()));
  }
}

std::string StateCodec::EncodeState(const ClusterState& s) {
  // One line of metadata, then one line per entity: small documents that decode in parallel.
  auto line = [](const char* kind, const json& value) {
    return json{{kind, value}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  };
  std::string out = json{{"format", kSnapshotFormat},
                         {"epoch", s.epoch_},
                         {"next_group_seq", s.next_group_seq_},
                         {"last_incarnation", s.last_incarnation_}}
                        .dump() +
                    "\n";
  for (const auto& [id, n] : s.nodes_) out += line("node", n);
  for (const auto& [id, g] : s.groups_) out += line("group", g);
  for (const auto& [id, w] : s.workers_) out += line("worker", w);
  for (const auto& [id, job] : s.jobs_) out += line("job", job);
  for (const auto& [id, run] : s.runs_) out += line("run", run);
  for (const auto& [name, p] : s.packages_) out += line("package", p);
  for (const auto& [id, a] : s.actors_) out += line("actor", a);
  for (const auto& [name, svc] : s.services_) out += line("service", svc);
  for (const auto& [id, revoked] : s.revoked_nodes_) out += line("revoked_node", revoked);
  return out;
}

namespace {

using Entity = std::variant<Node, Group, Worker, Job, Run, Package, Actor, Service, NodeRevoked>;

absl::StatusOr<Entity> DecodeEntity(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.size() != 1) return absl::InvalidArgumentError("not an entity object");
  const auto entry = j.begin();
  const std::string& kind = entry.key();
  const json& value = entry.value();
  try {
    if (kind == "node") return Entity(value.get<Node>());
    if (kind == "group") return Entity(value.get<Group>());
    if (kind == "worker") return Entity(value.get<Worker>());
    if (kind == "job") return Entity(value.get<Job>());
    if (kind == "run") return Entity(value.get<Run>());
    if (kind == "package") return Entity(value.get<Package>());
    if (kind == "actor") return Entity(value.get<Actor>());
    if (kind == "service") return Entity(value.get<Service>());
    if (kind == "revoked_node") return Entity(value.get<NodeRevoked>());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kind, ": ", e.what()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown entity \"", kind, "\""));
}

}  // namespace

absl::StatusOr<ClusterState> StateCodec::DecodeState(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.empty()) return absl::InvalidArgumentError("snapshot: empty");
  json meta = json::parse(lines[0], nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) return absl::InvalidArgumentError("snapshot: not a JSON object");
  if (meta.value("format", 0) != kSnapshotFormat) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: format ", meta.value("format", 0), " is not ",
                                                   kSnapshotFormat));
  }
  ClusterState s;
  try {
    TorusGetField(meta, "epoch", s.epoch_);
    TorusGetField(meta, "next_group_seq", s.next_group_seq_);
    TorusGetField(meta, "last_incarnation", s.last_incarnation_);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: ", e.what()));
  }
  // Entities decode in parallel, each thread a contiguous range of lines; they are added in order afterwards.
  std::vector<absl::StatusOr<Entity>> entities(lines.size() - 1, absl::UnknownError("not decoded"));
  ParallelFor(entities.size(), [&](size_t i) { entities[i] = DecodeEntity(lines[i + 1]); });
  for (size_t i = 0; i < entities.size(); ++i) {
    if (!entities[i].ok()) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot: line ", i + 2, ": ", entities[i].status().message()));
    }
    std::visit(
        [&s](auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, Node>) {
            if (e.alive()) ++s.alive_;
            const NodeId id = e.id();
            s.nodes_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Group>) {
            if (e.Live() && !e.name.empty()) s.live_names_[e.name] = e.id;
            s.Index(e);
            const GroupId id = e.id;
            s.groups_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Worker>) {
            const WorkerId id = e.id;
            s.workers_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Job>) {
            const JobId id = e.id;
            s.jobs_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Run>) {
            const RunId id = e.id;
            s.runs_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Actor>) {
            const ActorId id = e.id;
            if (e.state == ActorState::kDead) {
              s.dead_actors_.insert({e.end_time_ms, id});
            } else if (!e.name.empty()) {
              s.actor_names_[{e.ns, e.name}] = id;
            }
            s.actors_[id] = std::move(e);
          } else if constexpr (std::is_same_v<T, Service>) {
            const std::string name = e.name;
            s.services_[name] = std::move(e);
          } else if constexpr (std::is_same_v<T, NodeRevoked>) {
            const NodeId id = e.node;
            s.revoked_nodes_[id] = std::move(e);
          } else {
            const std::string name = e.name;
            s.packages_[name] = std::move(e);
          }
        },
        *entities[i]);
  }
  return s;
}

void ParallelFor(size_t n, const std::function<void(size_t)>& body) {
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 8);
  if (n < 256 || threads == 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::vector<std::thread> pool;
  const size_t per = (n + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t) {
    const size_t begin = t * per, end = std::min(n, begin + per);
    if (begin >= end) break;
    pool.emplace_back([&body, begin, end] {
      for (size_t i = begin; i < end; ++i) body(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace head
}  // namespace torus
