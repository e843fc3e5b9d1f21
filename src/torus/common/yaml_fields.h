// Reading typed fields out of YAML documents (cluster specs, autoscaler configs) with errors that name the field
// path and the accepted forms, e.g. `node_types[1].max_slices: must be an integer from 0 to 1000`.
//
// Every function here may meet a malformed document: none throws. Callers that index nodes themselves still catch
// YAML::Exception around the whole parse.
//
// Thread-safety: pure functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "torus/common/labels.h"
#include "torus/common/tpu_shape.h"

namespace torus {

// InvalidArgument "<path>: <message>" ("<message>" for the empty path: the document itself).
absl::Status FieldError(const std::string& path, absl::string_view message);

// `node` must be a map whose keys are all in `accepted`; the error lists them.
absl::Status CheckKeys(const YAML::Node& node, const std::string& path, const std::vector<std::string>& accepted);

absl::StatusOr<std::string> GetString(const YAML::Node& node, const std::string& path);
// An integer in [min, max].
absl::StatusOr<int> GetInt(const YAML::Node& node, const std::string& path, int min, int max);
// A number in [min, max] (finite).
absl::StatusOr<double> GetNumber(const YAML::Node& node, const std::string& path, double min, double max);
// A non-negative number of CPUs, at most 1e6.
absl::StatusOr<double> GetCpus(const YAML::Node& node, const std::string& path);
// A size in bytes ("64Mi", "2Gi", "1000000").
absl::StatusOr<int64_t> GetBytes(const YAML::Node& node, const std::string& path);
// A map of user labels, made canonical (CanonicalUserLabels).
absl::StatusOr<Labels> GetLabels(const YAML::Node& node, const std::string& path);

// A TPU slice shape: {pod_type: v6e-16 | accelerator_type: TPU-V6E, topology: 4x4, chips_per_host: 4}; the pod type
// and accelerator type, when both are given, must agree with the topology.
absl::StatusOr<SliceShape> GetSliceShape(const YAML::Node& node, const std::string& path);

// A name of 1-40 of a-z, 0-9 and '-', starting and ending with a letter or digit (node groups, node types).
bool ValidGroupName(const std::string& name);
// The error for a name ValidGroupName refuses.
absl::Status GroupNameError(const std::string& path, const std::string& name);

// Parses "16Gi", "512Mi", "8G", "1000000" into bytes.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace torus
