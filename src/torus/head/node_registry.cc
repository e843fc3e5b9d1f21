#include "torus/head/node_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torus/common/status.h"

namespace torus::head {
namespace {

bool IsIdChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

absl::Status ValidateResources(const std::string& field, const ResourceSet& resources) {
  for (const auto& [name, amount] : resources.amounts()) {
    absl::Status s = ValidateResourceName(name);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
    if (amount < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" must not be negative"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateNodeId(std::string_view id) {
  if (id.empty() || id.size() > 64 || !std::all_of(id.begin(), id.end(), IsIdChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id \"", std::string(id.substr(0, 80)), "\" is invalid; use 1-64 letters, digits, '_' or '-'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRegistration(const NodeRegistration& r) {
  TORUS_RETURN_IF_ERROR(ValidateNodeId(r.node_id));
  if (r.address.empty() || r.address.size() > 255) {
    return absl::InvalidArgumentError("address must be 1-255 characters (an IP or host name)");
  }
  if (r.hostname.size() > 255) return absl::InvalidArgumentError("hostname must be at most 255 characters");
  for (const auto& [key, value] : r.labels) {
    TORUS_RETURN_IF_ERROR(ValidateLabelKey(key));
    TORUS_RETURN_IF_ERROR(ValidateLabelValue(key, value));
  }
  TORUS_RETURN_IF_ERROR(ValidateResources("resources_total", r.total));
  TORUS_RETURN_IF_ERROR(ValidateResources("resources_available", r.available));
  return absl::OkStatus();
}

NodeRegistry::NodeRegistry(const Clock* clock, Options options)
    : clock_(clock), options_(options), next_incarnation_(static_cast<uint64_t>(clock->WallMillis()) * 1000) {}

void NodeRegistry::SetDeathListener(DeathListener listener) { death_listener_ = std::move(listener); }

void NodeRegistry::SetRegistrationListener(std::function<void(const std::string&)> listener) {
  registration_listener_ = std::move(listener);
}

absl::StatusOr<uint64_t> NodeRegistry::Register(NodeRegistration registration) {
  TORUS_RETURN_IF_ERROR(ValidateRegistration(registration));
  const std::string node_id = registration.node_id;
  uint64_t incarnation = 0;
  bool was_alive = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    NodeRecord& record = nodes_[node_id];
    was_alive = record.incarnation != 0 && record.state == NodeState::kAlive;
    incarnation = RegisterLocked(record, std::move(registration));
  }
  // A node that registers again while alive restarted: whatever the head placed on it is gone.
  if (was_alive && death_listener_) death_listener_(node_id, "re-registered (agent restarted)");
  if (registration_listener_) registration_listener_(node_id);
  return incarnation;
}

uint64_t NodeRegistry::RegisterLocked(NodeRecord& record, NodeRegistration registration) {
  if (record.incarnation != 0 && record.state == NodeState::kAlive) --alive_;
  record.available = registration.available;
  // Availability can never exceed what the node has.
  for (const auto& [name, amount] : record.available.amounts()) {
    if (amount > registration.total.GetFixed(name)) record.available.SetFixed(name, registration.total.GetFixed(name));
  }
  record.info = std::move(registration);
  record.state = NodeState::kAlive;
  record.incarnation = ++next_incarnation_;
  record.last_heard_micros = clock_->NowMicros();
  record.registered_wall_ms = clock_->WallMillis();
  record.died_micros = 0;
  record.death_reason.clear();
  ++alive_;
  return record.incarnation;
}

absl::StatusOr<HeartbeatOutcome> NodeRegistry::Heartbeat(const std::string& node_id, uint64_t incarnation,
                                                         const ResourceSet* available) {
  if (available != nullptr) TORUS_RETURN_IF_ERROR(ValidateResources("resources_available", *available));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.incarnation != incarnation || it->second.state != NodeState::kAlive) {
    return HeartbeatOutcome::kReregister;
  }
  NodeRecord& record = it->second;
  record.last_heard_micros = clock_->NowMicros();
  if (available != nullptr) record.available = *available;
  return HeartbeatOutcome::kOk;
}

absl::Status NodeRegistry::Unregister(const std::string& node_id, uint64_t incarnation, const std::string& reason) {
  std::vector<std::pair<std::string, std::string>> deaths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("node ", node_id, " is not registered"));
    if (it->second.incarnation != incarnation) return absl::OkStatus();
    std::string why = reason.empty() ? "unregistered" : absl::StrCat("unregistered: ", reason);
    if (MarkDeadLocked(it->second, why)) deaths.emplace_back(node_id, why);
    PruneDeadLocked();
  }
  NotifyDeaths(deaths);
  return absl::OkStatus();
}

absl::StatusOr<bool> NodeRegistry::MarkDead(const std::string& node_id, const std::string& reason) {
  std::vector<std::pair<std::string, std::string>> deaths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("node ", node_id, " is not registered"));
    std::string why = reason.empty() ? "marked dead by an operator" : absl::StrCat("marked dead: ", reason);
    if (MarkDeadLocked(it->second, why)) deaths.emplace_back(node_id, why);
    PruneDeadLocked();
  }
  NotifyDeaths(deaths);
  return !deaths.empty();
}

std::vector<std::string> NodeRegistry::ExpireSilentNodes() {
  std::vector<std::pair<std::string, std::string>> deaths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowMicros();
    for (auto& [id, record] : nodes_) {
      if (record.state != NodeState::kAlive) continue;
      const int64_t silent = now - record.last_heard_micros;
      if (silent <= options_.node_timeout_micros) continue;
      std::string why = absl::StrCat("no heartbeat for ", silent / 1000, " ms");
      if (MarkDeadLocked(record, why)) deaths.emplace_back(id, why);
    }
    if (!deaths.empty()) PruneDeadLocked();
  }
  NotifyDeaths(deaths);
  std::vector<std::string> ids;
  for (auto& d : deaths) ids.push_back(d.first);
  return ids;
}

bool NodeRegistry::MarkDeadLocked(NodeRecord& record, std::string reason) {
  if (record.state == NodeState::kDead) return false;
  record.state = NodeState::kDead;
  record.death_reason = std::move(reason);
  record.died_micros = clock_->NowMicros();
  --alive_;
  return true;
}

void NodeRegistry::PruneDeadLocked() {
  size_t dead = nodes_.size() - alive_;
  if (dead <= options_.max_dead_nodes) return;
  std::vector<std::pair<int64_t, std::string>> by_age;
  for (const auto& [id, record] : nodes_) {
    if (record.state == NodeState::kDead) by_age.emplace_back(record.died_micros, id);
  }
  std::sort(by_age.begin(), by_age.end());
  for (size_t i = 0; i < dead - options_.max_dead_nodes; ++i) nodes_.erase(by_age[i].second);
}

void NodeRegistry::NotifyDeaths(const std::vector<std::pair<std::string, std::string>>& deaths) {
  if (!death_listener_) return;
  for (const auto& [id, reason] : deaths) death_listener_(id, reason);
}

std::optional<Labels> NodeRegistry::CurrentLabels(const std::string& node_id, uint64_t incarnation) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive || it->second.incarnation != incarnation) {
    return std::nullopt;
  }
  return it->second.info.labels;
}

std::vector<NodeRecord> NodeRegistry::Records(bool include_dead) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeRecord> out;
  out.reserve(nodes_.size());
  for (const auto& [id, record] : nodes_) {
    if (include_dead || record.state == NodeState::kAlive) out.push_back(record);
  }
  return out;
}

std::vector<sched::NodeSnapshot> NodeRegistry::Snapshot(bool include_dead) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<sched::NodeSnapshot> out;
  out.reserve(nodes_.size());
  for (const auto& [id, record] : nodes_) {
    if (!include_dead && record.state != NodeState::kAlive) continue;
    out.push_back({id, record.info.address, record.state == NodeState::kAlive, record.info.labels,
                   record.info.total, record.available});
  }
  return out;
}

size_t NodeRegistry::AliveCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return alive_;
}

}  // namespace torus::head
