// GKE TPU device plugin metrics: per-chip duty cycle, TensorCore utilisation, HBM bandwidth utilisation and HBM
// use, read from the plugin's Prometheus text at http://<addr>/metrics (TPU_DEVICE_PLUGIN_ADDR).
//
// Example input (one chip; `_node` variants carry the same values without namespace/pod/container):
//   # TYPE tensorcore_utilization gauge
//   tensorcore_utilization{accelerator_id="4804690994094478883-0",make="cloud-tpu",model="tpu-v6e-slice"} 37.5
// gives chip 0 (the trailing index of accelerator_id) a TensorCore utilisation of 37.5 %.
//
// The parsers are pure. DevicePluginClient is thread-safe (each fetch makes its own HTTP client).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::metrics {

// One line of Prometheus text exposition.
struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, values unescaped
  double value = 0;                                         // may be NaN or +-Inf
  std::optional<int64_t> timestamp_ms;
};

// Parses the samples of the families in `families` (metric names), skipping comments, HELP/TYPE lines, blank lines
// and every line of another family unparsed. A line of a wanted family that is malformed (bad label syntax,
// unterminated quote, bad escape, missing or bad value or timestamp) fails the whole text with InvalidArgument
// "line N: <why>".
absl::StatusOr<std::vector<PromSample>> ParsePrometheusText(std::string_view text,
                                                            const std::set<std::string>& families);

// What the device plugin reports for one chip; a field is unset when not reported (or NaN).
struct PluginChipStats {
  std::optional<double> duty_cycle_percent;
  std::optional<double> tensorcore_utilization_percent;
  std::optional<double> memory_bandwidth_utilization_percent;
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
};

struct PluginChips {
  std::map<int, PluginChipStats> chips;
  std::vector<std::string> skipped;  // samples left out, as sentences
};

// The metric families the device plugin exports that torus reads (with and without the `_node` suffix).
const std::set<std::string>& DevicePluginFamilies();

// Per-chip stats from parsed samples. A `_node` value wins over the per-container one for the same chip; samples
// without a usable accelerator_id ("<instance id>-<index>") and second values for a chip are skipped with a reason.
PluginChips ExtractPluginChips(const std::vector<PromSample>& samples);

// The metrics URL for TPU_DEVICE_PLUGIN_ADDR: "host:port" or "http://host:port[/path]" (path default /metrics).
// InvalidArgument naming the variable for an empty value, another scheme, or a missing host.
struct HttpTarget {
  std::string scheme_host_port;  // "http://10.0.0.5:2112"
  std::string path;              // "/metrics"
};
absl::StatusOr<HttpTarget> ParseDevicePluginAddr(std::string_view addr);

class DevicePluginClient {
 public:
  explicit DevicePluginClient(HttpTarget target, int64_t timeout_ms = 1000)
      : target_(std::move(target)), timeout_ms_(timeout_ms) {}

  // GETs the metrics text and extracts the chips. Unavailable when unreachable or not 200; InvalidArgument when
  // the text is malformed.
  absl::StatusOr<PluginChips> Read() const;
  const HttpTarget& target() const { return target_; }

 private:
  const HttpTarget target_;
  const int64_t timeout_ms_;
};

}  // namespace torus::metrics
