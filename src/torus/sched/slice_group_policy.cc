#include "torus/sched/slice_group_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/device_env.h"
#include "torus/common/status.h"
#include "torus/sched/policy_util.h"
#include "torus/sched/slice_choice.h"

namespace torus::sched {
namespace {

constexpr size_t kMaxDetails = 8;

// One chips-per-host variant of an alternative that the cluster has slices of.
struct Variant {
  const ShapeEntry* shape;
  HostLayout layout;
};

std::vector<Variant> VariantsOf(const ClusterIndex& index, const SliceGroupRequest& request,
                                const SliceShapeRequest& alt) {
  const std::string topology = alt.topology.ToString();
  std::vector<Variant> variants;
  for (int cph : AdmissibleChipsPerHost(alt)) {
    const ShapeEntry* shape = index.FindShape(alt.generation, topology, cph);
    std::optional<HostLayout> layout = LayoutFor(request.unit, request.resources_per_bundle, cph);
    if (shape != nullptr && layout.has_value()) variants.push_back({shape, *layout});
  }
  const int default_cph = DefaultChipsPerHost(alt.generation, alt.topology);
  std::stable_sort(variants.begin(), variants.end(), [&](const Variant& a, const Variant& b) {
    if (a.shape->free.size() != b.shape->free.size()) return a.shape->free.size() > b.shape->free.size();
    return a.layout.chips_per_host == default_cph && b.layout.chips_per_host != default_cph;
  });
  return variants;
}

struct Choice {
  HostLayout layout;
  std::vector<int> slices;  // kept first, then chosen
};

SliceGroupPlacement Lay(const ClusterIndex& index, const Choice& choice, int alternative) {
  SliceGroupPlacement placement;
  placement.alternative = alternative;
  const HostLayout& layout = choice.layout;
  for (size_t i = 0; i < choice.slices.size(); ++i) {
    const Slice& slice = index.slices()[choice.slices[i]];
    placement.slice_names.push_back(slice.name);
    for (const SliceHost& host : slice.hosts) {
      std::vector<bool> busy(layout.chips_per_host, false);
      for (int b = 0; b < layout.bundles_per_host; ++b) {
        // Cannot fail: the blocks divide the host and are taken lowest first.
        std::vector<int> chips = *AllocateChipBlock(busy, layout.chips_per_bundle);
        for (int chip : chips) busy[chip] = true;
        placement.bundles.push_back(SliceBundle{host.node_id, slice.name, static_cast<int>(i), host.worker_id,
                                                std::move(chips), layout.per_bundle});
      }
    }
  }
  return placement;
}

struct Attempt {
  std::optional<Choice> choice;
  std::string line;
  bool infeasible = false;
};

// Why no variant of the alternative can be placed now; sets `infeasible` when none ever could.
void Explain(const ClusterIndex& index, const SliceShapeRequest& alt, const std::vector<Variant>& variants,
             const std::vector<std::string>& keep_slices, Attempt& attempt) {
  const std::string head = absl::StrCat(alt.ToString(), SelectorPhrase(alt.selector), ": ");
  std::vector<std::string> details;
  size_t hidden = 0;
  int best_available = 0, best_matching = 0;
  for (const Variant& v : variants) {
    std::vector<int> kept = ResolveKeep(index, *v.shape, alt, keep_slices);
    int available = static_cast<int>(kept.size()), matching = static_cast<int>(kept.size());
    if (!kept.empty()) {
      std::vector<std::string> names;
      for (int s : kept) names.push_back(index.slices()[s].name);
      details.push_back(absl::StrCat("keeping ", absl::StrJoin(names, ", ")));
    }
    const SliceCandidates candidates(index, *v.shape, alt.selector, /*free_only=*/false);
    for (int s : candidates.slices()) {
      if (std::find(kept.begin(), kept.end(), s) != kept.end()) continue;
      if (!candidates.selector_holds() && !SelectorHoldsOnSlice(index, s, alt.selector)) continue;
      ++matching;
      if (IsEligible(index, s, v.layout.per_host)) {
        ++available;
      } else if (details.size() < kMaxDetails) {
        details.push_back(Ineligibility(index, s, v.layout.per_host));
      } else {
        ++hidden;
      }
    }
    best_available = std::max(best_available, available);
    best_matching = std::max(best_matching, matching);
  }
  if (best_matching < alt.num_slices) {
    attempt.infeasible = true;
    const std::string_view which = alt.selector.empty() ? "" : " matches the selector";
    attempt.line = best_matching == 0
                       ? absl::StrCat(head, "infeasible: no slice of this shape", std::string(which))
                       : absl::StrCat(head, "infeasible: only ", Count(best_matching, "slice", "slices"),
                                      " of this shape", std::string(which));
    return;
  }
  if (hidden > 0) details.push_back(absl::StrCat("and ", hidden, " more"));
  attempt.line = absl::StrCat(head, best_available, " of ", alt.num_slices, " slices available (",
                              absl::StrJoin(details, "; "), ")");
}

Attempt TryAlternative(const ClusterIndex& index, const SliceGroupRequest& request, const SliceShapeRequest& alt) {
  Attempt attempt;
  const std::vector<Variant> variants = VariantsOf(index, request, alt);
  for (const Variant& v : variants) {
    std::vector<int> kept = ResolveKeep(index, *v.shape, alt, request.keep_slices);
    const int need = alt.num_slices - static_cast<int>(kept.size());
    std::vector<int> chosen =
        ChooseFreeSlices(index, *v.shape, need, alt.selector, v.layout.per_host, kept);
    if (static_cast<int>(chosen.size()) == need) {
      kept.insert(kept.end(), chosen.begin(), chosen.end());
      attempt.choice = Choice{v.layout, std::move(kept)};
      return attempt;
    }
  }
  Explain(index, alt, variants, request.keep_slices, attempt);
  return attempt;
}

absl::Status ValidateShape(const SliceGroupRequest& request, const SliceShapeRequest& alt, const std::string& prefix) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(prefix, parts...)); };
  const std::string accel(GetGenerationInfo(alt.generation).accelerator_type);
  if (alt.num_slices < 1) return error("num_slices ", alt.num_slices, " is not valid; ask for at least 1 slice");
  if (!IsValidTopology(alt.generation, alt.topology.dims)) {
    return error("topology \"", alt.topology.ToString(), "\" is not valid for ", accel, "; valid: ",
                 ValidTopologiesText(alt.generation));
  }
  if (alt.chips_per_host.has_value()) {
    if (auto shape = MakeSliceShape(alt.generation, alt.topology, alt.chips_per_host); !shape.ok()) {
      return error(std::string(shape.status().message()));
    }
  }
  const std::vector<int> admissible = AdmissibleChipsPerHost(alt);
  for (int cph : admissible) {
    if (LayoutFor(request.unit, request.resources_per_bundle, cph).has_value()) return absl::OkStatus();
  }
  const std::string per_host = absl::StrJoin(admissible, " or ");
  const int64_t tpu = request.resources_per_bundle ? request.resources_per_bundle->GetFixed(kResourceTpu) : 0;
  if (request.unit == BundleUnit::kHost) {
    return error("resources_per_bundle: TPU ", FormatFixed(tpu), " does not match the ", per_host,
                 " chips per host of ", accel, " ", alt.topology.ToString(),
                 "; a host bundle holds every chip of its host; use bundle_unit chip for smaller bundles");
  }
  return error("resources_per_bundle: TPU ", FormatFixed(tpu), " per chip bundle is not supported; use 1, 2, 4 or 8 ",
               "chips dividing the ", per_host, " chips per host of ", accel, " ", alt.topology.ToString());
}

}  // namespace

std::string SliceShapeRequest::ToString() const {
  std::string out = absl::StrCat(std::string(GetGenerationInfo(generation).accelerator_type), " ",
                                 topology.ToString(), " x", num_slices);
  if (chips_per_host.has_value()) absl::StrAppend(&out, " (", *chips_per_host, " chips per host)");
  return out;
}

absl::Status ValidateSliceGroupRequest(const SliceGroupRequest& request) {
  if (request.resources_per_bundle.has_value()) {
    const int64_t tpu = request.resources_per_bundle->GetFixed(kResourceTpu);
    if (tpu % kResourceScale != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources_per_bundle: TPU amount ", FormatFixed(tpu), " is not a whole number of chips"));
    }
  }
  TORUS_RETURN_IF_ERROR(ValidateShape(request, request.primary, ""));
  for (size_t i = 0; i < request.fallbacks.size(); ++i) {
    TORUS_RETURN_IF_ERROR(ValidateShape(request, request.fallbacks[i], AlternativePrefix(static_cast<int>(i + 1))));
  }
  std::set<std::string> seen;
  for (const std::string& name : request.keep_slices) {
    if (name.empty()) return absl::InvalidArgumentError("keep_slices: a slice name is empty");
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("keep_slices: slice \"", name, "\" is named twice"));
    }
  }
  return absl::OkStatus();
}

SliceGroupOutcome PlaceSliceGroup(const ClusterIndex& index, const SliceGroupRequest& request) {
  if (absl::Status valid = ValidateSliceGroupRequest(request); !valid.ok()) {
    return Infeasible{std::string(valid.message())};
  }
  std::vector<std::string> lines;
  bool pending = false;
  for (size_t a = 0; a <= request.fallbacks.size(); ++a) {
    const SliceShapeRequest& alt = a == 0 ? request.primary : request.fallbacks[a - 1];
    Attempt attempt = TryAlternative(index, request, alt);
    if (attempt.choice.has_value()) return Lay(index, *attempt.choice, static_cast<int>(a));
    pending = pending || !attempt.infeasible;
    lines.push_back(std::move(attempt.line));
  }
  if (pending) return Pending{JoinLines(lines)};
  return Infeasible{JoinLines(lines)};
}

}  // namespace torus::sched
