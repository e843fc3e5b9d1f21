// torus pg create | list | get | remove, and torus slice reserve.
#include <algorithm>
#include <chrono>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "torus/cli/commands.h"
#include "torus/cli/format.h"
#include "torus/cli/pg_spec.h"
#include "torus/client/client.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/status_json.h"

namespace torus::cli {
namespace {

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "torus " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kAlreadyExists ? 2
                                                                                                                   : 1;
}

absl::StatusOr<std::unique_ptr<client::Client>> Connect(const HeadFlags& head) {
  auto endpoint = client::ResolveHead(head.address, head.token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return client::Client::Connect(*endpoint);
}

// How long a create or reserve waits for its group to settle (wait_ready_ms), from --wait seconds.
int64_t WaitMillis(double wait_s) {
  return wait_s > 0 ? std::min<int64_t>(static_cast<int64_t>(wait_s * 1000), 3'600'000) : 0;
}

// Prints the group (as it was when the create's wait ended, when it waited); exit code 0 unless a wait ended
// without CREATED.
int Report(const std::string& command, const rpc::PlacementGroupView& view, double wait_s, bool json) {
  if (json) {
    std::cout << rpc::PlacementGroupToJson(view).dump(2) << "\n";
  } else {
    std::cout << FormatPlacementGroup(view);
  }
  if (wait_s > 0 && view.state() != "CREATED") {
    std::cerr << "torus " << command << ": " << view.id() << " is " << view.state() << " after " << wait_s
              << " s\n";
    return 1;
  }
  return 0;
}

}  // namespace

int CmdPgCreate(const HeadFlags& head, const PgCreateFlags& flags) {
  const std::string command = "pg create";
  rpc::PlacementGroupSpec spec;
  spec.set_name(flags.name);
  spec.set_strategy(flags.strategy);
  spec.set_timeout_s(flags.timeout_s);
  spec.set_wait_ready_ms(WaitMillis(flags.wait_s));
  auto bundles = ParseBundlesJson("--bundles", flags.bundles);
  if (!bundles.ok()) return Fail(command, bundles.status());
  if (!flags.bundle_label_selector.empty()) {
    absl::Status s = ApplyBundleSelectorsJson(flags.bundle_label_selector, *bundles);
    if (!s.ok()) return Fail(command, s);
  }
  for (auto& b : *bundles) *spec.add_bundles() = std::move(b);
  for (const std::string& text : flags.fallbacks) {
    auto alternative = ParseBundleFallbackJson(text);
    if (!alternative.ok()) return Fail(command, alternative.status());
    *spec.add_fallbacks() = *std::move(alternative);
  }
  auto client = Connect(head);
  if (!client.ok()) return Fail(command, client.status());
  auto view = (*client)->CreatePlacementGroup(spec);
  if (!view.ok()) return Fail(command, view.status());
  return Report(command, *view, flags.wait_s, flags.json);
}

int CmdSliceReserve(const HeadFlags& head, const SliceReserveFlags& flags) {
  const std::string command = "slice reserve";
  rpc::SliceGroupSpec spec;
  spec.set_name(flags.name);
  spec.set_per_chip(flags.per_chip);
  spec.set_timeout_s(flags.timeout_s);
  spec.set_wait_ready_ms(WaitMillis(flags.wait_s));
  rpc::SliceShapeProto* primary = spec.mutable_primary();
  primary->set_accelerator_type(flags.accelerator_type);
  primary->set_topology(flags.topology);
  primary->set_num_slices(flags.num_slices);
  primary->set_chips_per_host(flags.chips_per_host);
  if (!flags.label_selector.empty()) {
    auto selector = ParseSelectorJson("--label-selector", flags.label_selector);
    if (!selector.ok()) return Fail(command, selector.status());
    primary->mutable_label_selector()->insert(selector->begin(), selector->end());
  }
  for (const std::string& text : flags.fallbacks) {
    auto shape = ParseFallbackShape(text);
    if (!shape.ok()) return Fail(command, shape.status());
    *shape->mutable_label_selector() = primary->label_selector();
    *spec.add_fallbacks() = *std::move(shape);
  }
  if (!flags.resources_per_bundle.empty()) {
    auto bundles = ParseBundlesJson("--resources-per-bundle", "[" + flags.resources_per_bundle + "]");
    if (!bundles.ok()) return Fail(command, bundles.status());
    *spec.mutable_resources_per_bundle() = (*bundles)[0].resources();
  }
  auto client = Connect(head);
  if (!client.ok()) return Fail(command, client.status());
  auto view = (*client)->ReserveSlices(spec);
  if (!view.ok()) return Fail(command, view.status());
  return Report(command, *view, flags.wait_s, flags.json);
}

int CmdPgList(const HeadFlags& head, bool include_removed, bool json) {
  auto client = Connect(head);
  if (!client.ok()) return Fail("pg list", client.status());
  auto groups = (*client)->ListPlacementGroups(include_removed);
  if (!groups.ok()) return Fail("pg list", groups.status());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& g : *groups) out.push_back(rpc::PlacementGroupToJson(g));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << FormatPlacementGroups(*groups);
  }
  return 0;
}

int CmdPgGet(const HeadFlags& head, const std::string& id, double wait_s, bool json) {
  auto client = Connect(head);
  if (!client.ok()) return Fail("pg get", client.status());
  auto view = (*client)->WaitUntilReady(id, std::chrono::milliseconds(WaitMillis(wait_s)));
  if (!view.ok()) return Fail("pg get", view.status());
  return Report("pg get", *view, wait_s, json);
}

int CmdPgRemove(const HeadFlags& head, const std::string& id) {
  auto client = Connect(head);
  if (!client.ok()) return Fail("pg remove", client.status());
  auto view = (*client)->RemovePlacementGroup(id);
  if (!view.ok()) return Fail("pg remove", view.status());
  std::cout << view->id() << " " << view->state() << "\n";
  return 0;
}

}  // namespace torus::cli
