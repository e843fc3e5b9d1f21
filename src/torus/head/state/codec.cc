#include "torus/head/state/codec.h"

#include <functional>
#include <map>

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

NLOHMANN_JSON_SERIALIZE_ENUM(Strategy, {{Strategy::kPack, "PACK"},
                                        {Strategy::kSpread, "SPREAD"},
                                        {Strategy::kStrictPack, "STRICT_PACK"},
                                        {Strategy::kStrictSpread, "STRICT_SPREAD"}})
NLOHMANN_JSON_SERIALIZE_ENUM(BundleUnit, {{BundleUnit::kHost, "host"}, {BundleUnit::kChip, "chip"}})
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(BundleAlternative, bundles, bundle_selectors)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(BundleRequest, primary, fallbacks, strategy, fixed)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SliceShapeRequest, generation, topology, num_slices, chips_per_host,
                                                selector)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SliceGroupRequest, primary, fallbacks, unit, resources_per_bundle,
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

NLOHMANN_JSON_SERIALIZE_ENUM(NodeState, {{NodeState::kAlive, "ALIVE"}, {NodeState::kDead, "DEAD"}})
NLOHMANN_JSON_SERIALIZE_ENUM(PgState, {{PgState::kPending, "PENDING"},
                                       {PgState::kCreated, "CREATED"},
                                       {PgState::kRescheduling, "RESCHEDULING"},
                                       {PgState::kRemoved, "REMOVED"},
                                       {PgState::kFailed, "FAILED"}})
NLOHMANN_JSON_SERIALIZE_ENUM(PgKind, {{PgKind::kBundles, "bundles"}, {PgKind::kSlices, "slices"}})
NLOHMANN_JSON_SERIALIZE_ENUM(OwnerKind, {{OwnerKind::kNone, ""}, {OwnerKind::kJob, "job"}, {OwnerKind::kRun, "run"}})
NLOHMANN_JSON_SERIALIZE_ENUM(WorkerPhase, {{WorkerPhase::kStarting, "STARTING"},
                                           {WorkerPhase::kRunning, "RUNNING"},
                                           {WorkerPhase::kExited, "EXITED"}})
NLOHMANN_JSON_SERIALIZE_ENUM(JobStatus, {{JobStatus::kPending, "PENDING"},
                                         {JobStatus::kRunning, "RUNNING"},
                                         {JobStatus::kStopped, "STOPPED"},
                                         {JobStatus::kSucceeded, "SUCCEEDED"},
                                         {JobStatus::kFailed, "FAILED"}})
NLOHMANN_JSON_SERIALIZE_ENUM(RunStatus, {{RunStatus::kPending, "PENDING"},
                                         {RunStatus::kRunning, "RUNNING"},
                                         {RunStatus::kRestarting, "RESTARTING"},
                                         {RunStatus::kSucceeded, "SUCCEEDED"},
                                         {RunStatus::kFailed, "FAILED"},
                                         {RunStatus::kStopped, "STOPPED"}})

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeRegistration, node_id, address, hostname, total, labels, pid,
                                                start_time_ms, agent_port)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Node, info, state, incarnation, registered_wall_ms, died_wall_ms,
                                                death_reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Owner, kind, id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HeldBundle, index, ledger_index, node, ledger_group, attempt,
                                                slice_name, worker_id, chips, gpus, resources, lost)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PgEvent, time_ms, state, message)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Group, id, name, kind, bundle_request, slice_request, request_text,
                                                owner, seq, state, reason, alternative, bundles, slices, history,
                                                created_wall_ms, timeout_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkerExit, exit_code, signal, lost, reason, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Worker, id, owner, attempt, rank, node, group, ledger_group, bundle,
                                                chips, gpus, phase, pid, start_wall_ms, exit)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobRequest, entrypoint, submission_id, env_vars, working_dir, metadata,
                                                resources, label_selector, runtime_env_json)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Job, id, request, status, message, error_type, submit_time_ms,
                                                start_time_ms, end_time_ms, group, worker, exit_code, stop_requested)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RankState, rank, worker, node, address, slice_name, chips, gpus)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MetricPoint, step, metrics_json, time_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunAttempt, number, start_time_ms, end_time_ms, end_reason,
                                                checkpoint_dir, ranks, metrics)

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
}
void from_json(const json& j, Run& r) {
  r.id = j.at("id").get<RunId>();
  auto spec = train::RunSpecFromJson(j.at("spec").get<std::string>());
  if (!spec.ok()) throw std::invalid_argument(absl::StrCat("spec: ", spec.status().message()));
  r.spec = *std::move(spec);
  auto plan = train::PlanRun(r.spec);
  if (!plan.ok()) throw std::invalid_argument(absl::StrCat("spec: ", plan.status().message()));
  r.plan = *std::move(plan);
  j.at("group").get_to(r.group);
  j.at("token").get_to(r.token);
  j.at("status").get_to(r.status);
  j.at("message").get_to(r.message);
  j.at("failures").get_to(r.failures);
  j.at("attempts").get_to(r.attempts);
  j.at("created_time_ms").get_to(r.created_time_ms);
  j.at("end_time_ms").get_to(r.end_time_ms);
  j.at("stop_requested").get_to(r.stop_requested);
  j.at("reports").get_to(r.reports);
  j.at("committed").get_to(r.committed);
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HeadStarted, epoch, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeRegistered, info, incarnation, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeDied, node, incarnation, reason, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GroupSubmitted, group)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GroupPlaced, group, alternative, bundles, slices, message, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GroupWaiting, group, reason, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GroupBundlesLost, group, lost_indices, dropped_slices, message, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GroupEnded, group, state, message, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkerStarting, worker)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkerStarted, worker, pid, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkerExited, worker, exit)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobSubmitted, job)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobUpdated, job, status, message, error_type, exit_code, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobStopRequested, job)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobDeleted, job)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunSubmitted, run, spec_json, token, group, committed, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttemptStarted, run, attempt)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttemptEnded, run, number, reason, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunFinished, run, status, message, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunStopRequested, run)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunReported, run, attempt, rank, step, metrics_json, checkpoint, wall_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CheckpointCommitted, run, step, dir, committed)

namespace {

using Decoder = std::function<Record(const json&)>;

template <typename T>
std::pair<std::string, Decoder> Entry() {
  return {std::string(RecordName(Record(T{}))), [](const json& j) { return Record(j.get<T>()); }};
}

const std::map<std::string, Decoder, std::less<>>& Decoders() {
  static const auto* decoders = new std::map<std::string, Decoder, std::less<>>{
      Entry<HeadStarted>(),      Entry<NodeRegistered>(),   Entry<NodeDied>(),          Entry<GroupSubmitted>(),
      Entry<GroupPlaced>(),      Entry<GroupWaiting>(),     Entry<GroupBundlesLost>(),  Entry<GroupEnded>(),
      Entry<WorkerStarting>(),   Entry<WorkerStarted>(),    Entry<WorkerExited>(),      Entry<JobSubmitted>(),
      Entry<JobUpdated>(),       Entry<JobStopRequested>(), Entry<JobDeleted>(),        Entry<RunSubmitted>(),
      Entry<AttemptStarted>(),   Entry<AttemptEnded>(),     Entry<RunFinished>(),       Entry<RunStopRequested>(),
      Entry<RunReported>(),      Entry<CheckpointCommitted>()};
  return *decoders;
}

constexpr int kSnapshotFormat = 1;

}  // namespace

std::string StateCodec::EncodeRecord(const Record& record) {
  json j = std::visit([](const auto& r) { return json(r); }, record);
  j["type"] = RecordName(record);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
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
  json j = {{"format", kSnapshotFormat},
            {"epoch", s.epoch_},
            {"next_group_seq", s.next_group_seq_},
            {"last_incarnation", s.last_incarnation_},
            {"nodes", json::array()},
            {"groups", json::array()},
            {"workers", json::array()},
            {"jobs", json::array()},
            {"runs", json::array()}};
  for (const auto& [id, n] : s.nodes_) j["nodes"].push_back(n);
  for (const auto& [id, g] : s.groups_) j["groups"].push_back(g);
  for (const auto& [id, w] : s.workers_) j["workers"].push_back(w);
  for (const auto& [id, job] : s.jobs_) j["jobs"].push_back(job);
  for (const auto& [id, run] : s.runs_) j["runs"].push_back(run);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<ClusterState> StateCodec::DecodeState(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("snapshot: not a JSON object");
  if (j.value("format", 0) != kSnapshotFormat) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: format ", j.value("format", 0), " is not ",
                                                   kSnapshotFormat));
  }
  ClusterState s;
  try {
    j.at("epoch").get_to(s.epoch_);
    j.at("next_group_seq").get_to(s.next_group_seq_);
    j.at("last_incarnation").get_to(s.last_incarnation_);
    for (const json& n : j.at("nodes")) {
      Node node = n.get<Node>();
      if (node.alive()) ++s.alive_;
      s.nodes_[node.id()] = std::move(node);
    }
    for (const json& g : j.at("groups")) {
      Group group = g.get<Group>();
      if (group.Live() && !group.name.empty()) s.live_names_[group.name] = group.id;
      s.groups_[group.id] = std::move(group);
    }
    for (const json& w : j.at("workers")) {
      Worker worker = w.get<Worker>();
      s.workers_[worker.id] = std::move(worker);
    }
    for (const json& jb : j.at("jobs")) {
      Job job = jb.get<Job>();
      s.jobs_[job.id] = std::move(job);
    }
    for (const json& r : j.at("runs")) {
      Run run = r.get<Run>();
      s.runs_[run.id] = std::move(run);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: ", e.what()));
  }
  return s;
}

}  // namespace head
}  // namespace torus
