// libFuzzer target for the GKE TPU device plugin's metrics (docs/fuzzing.md): its Prometheus text, as the agent
// reads it, and the TPU_DEVICE_PLUGIN_ADDR variable. The whole input is tried as each.
// Parsing may fail, with InvalidArgument; it must never crash. Samples that parse are printed back in the
// exposition format (the printer is here: the agent only reads this format) and must parse to the same samples;
// the chips extracted from them have indices in range and no NaN readings. An address that parses prints as a URL
// that parses to the same target.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "torus/head/metrics/prometheus.h"
#include "torus/metrics/device_plugin.h"

namespace {

using torus::metrics::PromSample;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", value);
}

// One line per sample, as Prometheus' text exposition writes it, label values escaped by the head's writer
// (head/metrics/prometheus.h), so that the agent's parser reads back what the head writes.
std::string Print(const std::vector<PromSample>& samples) {
  std::string out = "# TYPE printed gauge\n";
  for (const PromSample& s : samples) {
    absl::StrAppend(&out, s.name);
    if (!s.labels.empty()) {
      out += "{";
      for (size_t i = 0; i < s.labels.size(); ++i) {
        absl::StrAppend(&out, i == 0 ? "" : ",", s.labels[i].first, "=\"", torus::head::EscapeLabelValue(s.labels[i].second), "\"");
      }
      out += "}";
    }
    absl::StrAppend(&out, " ", FormatValue(s.value));
    if (s.timestamp_ms) absl::StrAppend(&out, " ", *s.timestamp_ms);
    out += "\n";
  }
  return out;
}

bool SameSample(const PromSample& a, const PromSample& b) {
  const bool same_value = (std::isnan(a.value) && std::isnan(b.value)) || a.value == b.value;
  return a.name == b.name && a.labels == b.labels && a.timestamp_ms == b.timestamp_ms && same_value;
}

void CheckChips(const torus::metrics::PluginChips& chips) {
  for (const auto& [chip, stats] : chips.chips) {
    Require(chip >= 0 && chip <= 4096);
    for (const std::optional<double>& value :
         {stats.duty_cycle_percent, stats.tensorcore_utilization_percent, stats.memory_bandwidth_utilization_percent,
          stats.memory_used_bytes, stats.memory_total_bytes}) {
      Require(!value || !std::isnan(*value));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::set<std::string>& families = torus::metrics::DevicePluginFamilies();

  absl::StatusOr<std::vector<PromSample>> samples = torus::metrics::ParsePrometheusText(input, families);
  if (samples.ok()) {
    absl::StatusOr<std::vector<PromSample>> reparsed = torus::metrics::ParsePrometheusText(Print(*samples), families);
    Require(reparsed.ok() && reparsed->size() == samples->size());
    for (size_t i = 0; i < samples->size(); ++i) Require(SameSample((*samples)[i], (*reparsed)[i]));
    CheckChips(torus::metrics::ExtractPluginChips(*samples));
  } else {
    Require(samples.status().code() == absl::StatusCode::kInvalidArgument);
  }

  absl::StatusOr<torus::metrics::HttpTarget> target = torus::metrics::ParseDevicePluginAddr(input);
  if (target.ok()) {
    Require(absl::StartsWith(target->scheme_host_port, "http://") && target->scheme_host_port.size() > 7);
    Require(absl::StartsWith(target->path, "/"));
    absl::StatusOr<torus::metrics::HttpTarget> again =
        torus::metrics::ParseDevicePluginAddr(target->scheme_host_port + target->path);
    Require(again.ok() && again->scheme_host_port == target->scheme_host_port && again->path == target->path);
  }
  return 0;
}
