// Small pieces the placement policies share: fit tests against a node's free capacity, the measures they score
// nodes by, and the wording of reasons. Internal to the scheduling core.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/sched/cluster_index.h"

namespace torus::sched {

// Whether a request for `tpu_fixed` TPU (fixed point) can get an aligned block of free chips on `node`
// (AllocateChipBlock's rule; a request of the host's chip count needs every chip free). True when tpu_fixed is 0.
bool ChipBlockFree(const ClusterIndex& index, int node, int64_t tpu_fixed);

// Whether `demand` asks for TPU or GPU (and so can only fit accelerator hosts).
bool NeedsAccelerator(const ResourceSet& demand);

// Utilisation of a node with `free` left before placing `demand`: the max over the node's resources of
// used / total after placement (the node's current utilisation bounds the resources `demand` does not touch).
double UtilisationAfter(const ClusterIndex& index, int node, const ResourceSet& free, const ResourceSet& demand);

// Free capacity left on a node after placing `demand`, over the resources `demand` names: the sum of
// (free - demand) / total. Smaller is a tighter fit.
double Headroom(const ClusterIndex& index, int node, const ResourceSet& free, const ResourceSet& demand);

// " matching <selector>" or "" for the empty selector.
std::string SelectorPhrase(const LabelSelector& selector);
// "" for the primary (0), "fallback <i>: " for fallback i.
std::string AlternativePrefix(int alternative);
// The lines joined by '\n'.
std::string JoinLines(const std::vector<std::string>& lines);
// "1 node" / "3 nodes".
std::string Count(size_t n, std::string_view singular, std::string_view plural);

}  // namespace torus::sched
