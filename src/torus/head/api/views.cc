#include "torus/head/api/views.h"

#include <algorithm>

#include "torus/head/workloads/goodput.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

rpc::SliceState ToProtoState(sched::SliceState s) {
  switch (s) {
    case sched::SliceState::kIncomplete: return rpc::INCOMPLETE;
    case sched::SliceState::kReady: return rpc::READY;
    case sched::SliceState::kReserved: return rpc::RESERVED;
    case sched::SliceState::kDegraded: return rpc::DEGRADED;
  }
  return rpc::SLICE_STATE_UNSPECIFIED;
}

nlohmann::json NullIfZero(int64_t v) { return v == 0 ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

void ToNodeView(const Node& n, const ResourceSet& available, const Liveness& liveness, int64_t wall_ms,
                rpc::NodeView* view) {
  rpc::NodeInfo* info = view->mutable_info();
  info->set_node_id(n.info.node_id);
  info->set_address(n.info.address);
  info->set_hostname(n.info.hostname);
  rpc::ToProto(n.info.total, info->mutable_resources_total());
  rpc::ToProto(n.info.labels, info->mutable_labels());
  info->set_pid(n.info.pid);
  info->set_start_time_ms(n.info.start_time_ms);
  info->set_agent_port(n.info.agent_port);
  view->set_state(n.alive() ? rpc::ALIVE : rpc::DEAD);
  view->set_incarnation(n.incarnation);
  rpc::ToProto(available, view->mutable_resources_available());
  std::optional<int64_t> silent = n.alive() ? liveness.SilentMicros(n.id()) : std::nullopt;
  view->set_last_heartbeat_age_ms(silent ? *silent / 1000 : std::max<int64_t>(0, wall_ms - n.died_wall_ms));
  view->set_death_reason(n.death_reason);
  view->set_registered_time_ms(n.registered_wall_ms);
}

std::optional<rpc::NodeView> NodeViewOf(const ClusterState& state, const Liveness& liveness, const NodeId& node,
                                        int64_t wall_ms) {
  const Node* n = state.FindNode(node);
  if (n == nullptr) return std::nullopt;
  ResourceSet available = n->alive() ? n->info.total : ResourceSet();
  if (n->alive()) {
    for (const Group* g : state.GroupsOn(node)) {
      for (const HeldBundle& b : g->bundles) {
        if (!b.lost && b.node == node) available.Subtract(b.resources);
      }
    }
  }
  rpc::NodeView view;
  ToNodeView(*n, available, liveness, wall_ms, &view);
  return view;
}

void BuildClusterStatus(const ClusterState& state, const Liveness& liveness, bool include_dead, int64_t wall_ms,
                        rpc::ClusterStatus* out) {
  ResourceSet total, available;
  for (const sched::NodeSnapshot& s : state.NodeSnapshots(/*include_dead=*/true)) {
    const Node& n = *state.FindNode(NodeId(s.node_id));
    if (n.alive()) {
      total.Add(s.total);
      available.Add(s.available);
    } else if (!include_dead) {
      continue;
    }
    ToNodeView(n, n.alive() ? s.available : ResourceSet(), liveness, wall_ms, out->add_nodes());
  }
  rpc::ToProto(total, out->mutable_resources_total());
  rpc::ToProto(available, out->mutable_resources_available());
  const std::map<std::string, std::string> holders = state.SliceHolders();
  for (const sched::Slice& s : state.Slices()) {
    rpc::SliceView* view = out->add_slices();
    view->set_name(s.name);
    view->set_accelerator_type(s.accelerator_type);
    view->set_topology(s.topology);
    view->set_pod_type(s.pod_type);
    view->set_chips_per_host(s.chips_per_host);
    view->set_expected_hosts(s.expected_hosts);
    view->set_hosts_alive(s.hosts_alive);
    view->set_state(ToProtoState(s.state));
    view->set_reason(s.reason);
    if (auto it = holders.find(s.name); it != holders.end()) view->set_reserved_by(it->second);
    for (const sched::SliceHost& h : s.hosts) {
      rpc::SliceHost* host = view->add_hosts();
      host->set_worker_id(h.worker_id);
      host->set_node_id(h.node_id);
      host->set_node_state(h.alive ? rpc::ALIVE : rpc::DEAD);
      host->set_address(h.address);
      host->set_chips(h.chips);
    }
  }
  std::vector<const Group*> waiting;
  for (const GroupId& id : state.waiting_groups()) waiting.push_back(state.FindGroup(id));
  std::sort(waiting.begin(), waiting.end(), [](const Group* a, const Group* b) { return a->seq < b->seq; });
  for (const Group* g : waiting) *out->add_pending() = GroupView(state, *g);
}

rpc::PlacementGroupView GroupView(const ClusterState& state, const Group& group) {
  rpc::PlacementGroupView view;
  view.set_id(group.id.str());
  view.set_name(group.name);
  view.set_kind(group.kind == PgKind::kSlices ? "slice_group" : "placement_group");
  view.set_state(PgStateName(group.state));
  view.set_reason(group.reason);
  view.set_request(group.request_text);
  view.set_alternative(group.alternative);
  view.set_created_time_ms(group.created_wall_ms);
  for (const HeldBundle& b : group.bundles) {
    rpc::PlacedBundle* out = view.add_bundles();
    out->set_index(b.index);
    if (!b.lost) {
      out->set_node_id(b.node.str());
      if (const Node* n = state.FindNode(b.node)) out->set_address(n->info.address);
    }
    out->set_slice_name(b.slice_name);
    out->set_worker_id(b.worker_id);
    for (int chip : b.chips) out->add_chips(chip);
    for (int gpu : b.gpus) out->add_gpus(gpu);
    rpc::ToProto(b.resources, out->mutable_resources());
  }
  for (const std::string& s : group.slices) view.add_slices(s);
  for (const PgEvent& e : group.history) {
    rpc::StateEvent* out = view.add_history();
    out->set_time_ms(e.time_ms);
    out->set_state(e.state);
    out->set_message(e.message);
  }
  return view;
}

namespace {

// A job's error type as Ray's JobErrorType names it: the loss of the node running a job is what Ray calls the death of
// the job's supervisor (Ray's clients parse error_type with that enum).
nlohmann::json RayErrorType(const std::string& error_type) {
  if (error_type.empty()) return nullptr;
  return error_type == "NODE_DIED" ? "JOB_SUPERVISOR_ACTOR_DIED" : error_type;
}

}  // namespace

nlohmann::json JobDetailsJson(const JobView& view) {
  const Job& job = view.job;
  nlohmann::json driver = nullptr;
  if (view.worker && view.worker->pid != 0) {
    driver = {{"id", view.worker->id.str()},
              {"node_ip_address", view.node_address},
              {"pid", std::to_string(view.worker->pid)}};
  }
  auto runtime_env = nlohmann::json::parse(job.request.runtime_env_json, nullptr, false);
  return {{"type", "SUBMISSION"},
          {"job_id", job.id.str()},
          {"submission_id", job.id.str()},
          {"driver_info", driver},
          {"status", JobStatusName(job.status)},
          {"entrypoint", job.request.entrypoint},
          {"message", view.message},
          {"error_type", RayErrorType(job.error_type)},
          {"start_time", NullIfZero(job.start_time_ms)},
          {"end_time", NullIfZero(job.end_time_ms)},
          {"metadata", job.request.metadata},
          {"runtime_env", runtime_env.is_discarded() ? nlohmann::json(nullptr) : runtime_env},
          {"entrypoint_label_selector", job.request.label_selector},
          {"driver_agent_http_address", nullptr},
          {"driver_node_id", view.worker ? nlohmann::json(view.worker->node.str()) : nlohmann::json(nullptr)},
          {"driver_exit_code", job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json(nullptr)}};
}

nlohmann::json RunJson(const RunView& view) {
  const Run& run = view.run;
  nlohmann::json attempts = nlohmann::json::array();
  for (size_t i = 0; i < run.attempts.size(); ++i) {
    const RunAttempt& a = run.attempts[i];
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t r = 0; r < a.ranks.size(); ++r) {
      const RankState& rank = a.ranks[r];
      const std::optional<Worker>& w = view.workers[i][r];
      const bool exited = w && w->phase == WorkerPhase::kExited;
      nlohmann::json j = {{"rank", rank.rank},
                          {"node_id", rank.node.str()},
                          {"address", rank.address},
                          {"worker_id", rank.worker.str()},
                          {"exited", exited}};
      if (!rank.slice_name.empty()) {
        j["slice"] = rank.slice_name;
        j["chips"] = rank.chips;
      }
      if (!rank.gpus.empty()) j["gpus"] = rank.gpus;
      if (w && w->pid != 0) j["pid"] = w->pid;
      if (exited && w->exit) {
        j["exit_code"] = w->exit->exit_code;
        j["signal"] = w->exit->signal;
        if (w->exit->lost || w->exit->start_failed) j["error"] = w->exit->Describe();
        if (w->exit->stopped) j["stopped"] = true;
        if (w->exit->oom_killed) j["oom_killed"] = true;
        if (w->exit->peak_rss_bytes > 0) j["peak_rss_bytes"] = w->exit->peak_rss_bytes;
      }
      ranks.push_back(std::move(j));
    }
    nlohmann::json metrics = nlohmann::json::array();
    for (const StepMetrics& m : a.metrics) {
      auto parsed = nlohmann::json::parse(m.metrics_json, nullptr, false);
      metrics.push_back({{"step", m.step},
                         {"metrics", parsed.is_discarded() ? nlohmann::json::object() : parsed},
                         {"time_ms", m.time_ms}});
    }
    attempts.push_back({{"attempt", a.number},
                        {"start_time_ms", a.start_time_ms},
                        {"end_time_ms", a.end_time_ms},
                        {"end_reason", a.end_reason},
                        {"cause", a.cause},
                        {"end_details", a.end_details},
                        {"explained", a.explained},
                        {"first_report_ms", NullIfZero(a.first_report_ms)},
                        {"checkpoint_dir", a.checkpoint_dir},
                        {"ranks", ranks},
                        {"metrics", metrics}});
  }
  nlohmann::json committed = nlohmann::json::array();
  for (const auto& [step, dir] : run.committed) committed.push_back({{"step", step}, {"dir", dir}});
  const RunAttempt* current = run.current();
  const Goodput goodput = RunGoodput(run, view.now_ms);
  nlohmann::json goodput_attempts = nlohmann::json::array();
  auto seconds = [](int64_t ms) { return static_cast<double>(ms) / 1000.0; };
  for (const AttemptGoodput& a : goodput.attempts) {
    goodput_attempts.push_back({{"attempt", a.number},
                                {"waiting_s", seconds(a.waiting_ms)},
                                {"startup_s", seconds(a.startup_ms)},
                                {"productive_s", seconds(a.productive_ms)},
                                {"lost_s", seconds(a.lost_ms)}});
  }
  return {{"run_id", run.id.str()},
          {"name", run.spec.run.name},
          {"status", RunStatusName(run.status)},
          {"message", run.message},
          {"failures", run.failures},
          {"max_failures", run.spec.run.max_failures},
          {"num_workers", current == nullptr ? run.plan.num_workers : static_cast<int>(current->ranks.size())},
          {"group_id", run.group.str()},
          {"storage_path", run.storage()},
          {"entrypoint", run.spec.entrypoint},
          {"created_time_ms", run.created_time_ms},
          {"end_time_ms", run.end_time_ms},
          {"attempt", current == nullptr ? 0 : current->number},
          {"attempts", attempts},
          {"checkpoints", committed},
          {"goodput",
           {{"wall_s", seconds(goodput.wall_ms)},
            {"queued_s", seconds(goodput.queued_ms)},
            {"startup_s", seconds(goodput.startup_ms)},
            {"productive_s", seconds(goodput.productive_ms)},
            {"lost_s", seconds(goodput.lost_ms)},
            {"restart_s", seconds(goodput.restart_ms)},
            {"goodput", goodput.ratio},
            {"attempts", goodput_attempts}}}};
}

}  // namespace torus::head
