#include "torus/metrics/libtpu_metrics.h"

#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/credentials.h"

namespace torus::metrics {
namespace {

namespace tpu_rt = ::tpu::monitoring::runtime;

// Device ids above this are not chips of one host: a garbage value, not a reason to allocate.
constexpr int64_t kMaxDeviceId = 1 << 16;

// Byte counts beyond this are refused: far above any device's HBM, and small enough that summing the two devices of
// a chip stays within int64.
constexpr double kMaxBytes = 1e18;

std::optional<double> GaugeValue(const tpu_rt::Gauge& gauge, GaugeKind kind, std::string* why) {
  switch (gauge.value_case()) {
    case tpu_rt::Gauge::kAsInt:
    case tpu_rt::Gauge::kAsDouble: {
      const double value = gauge.value_case() == tpu_rt::Gauge::kAsInt ? static_cast<double>(gauge.as_int())
                                                                         : gauge.as_double();
      if (!std::isfinite(value)) {
        *why = "a non-finite value";
        return std::nullopt;
      }
      if (kind == GaugeKind::kInt && (value < 0 || value > kMaxBytes)) {
        *why = value < 0 ? "a negative byte count" : "a byte count beyond 1e18";
        return std::nullopt;
      }
      return value;
    }
    case tpu_rt::Gauge::kAsString:
      *why = "a string value";
      return std::nullopt;
    case tpu_rt::Gauge::kAsBool:
      *why = "a bool value";
      return std::nullopt;
    case tpu_rt::Gauge::VALUE_NOT_SET:
      break;
  }
  *why = "an empty gauge";
  return std::nullopt;
}

}  // namespace

PerDeviceValues ParsePerDeviceGauge(const tpu_rt::MetricResponse& response, std::string_view expected_name,
                                    GaugeKind kind) {
  PerDeviceValues out;
  const tpu_rt::TPUMetric& metric = response.metric();
  if (metric.name() != expected_name) {
    out.skipped.push_back(absl::StrCat("asked for ", std::string(expected_name), " but libtpu answered with '",
                                       metric.name(), "'"));
    return out;
  }
  for (int i = 0; i < metric.metrics_size(); ++i) {
    const tpu_rt::Metric& m = metric.metrics(i);
    const std::string where = absl::StrCat(std::string(expected_name), " entry ", i, ": ");
    if (!m.has_attribute() || !m.attribute().has_value()) {
      out.skipped.push_back(absl::StrCat(where, "no device attribute"));
      continue;
    }
    if (m.attribute().value().attr_case() != tpu_rt::AttrValue::kIntAttr) {
      out.skipped.push_back(absl::StrCat(where, "device attribute '", m.attribute().key(), "' is not an int_attr"));
      continue;
    }
    const int64_t id = m.attribute().value().int_attr();
    if (id < 0 || id > kMaxDeviceId) {
      out.skipped.push_back(absl::StrCat(where, "device id ", id, " out of range 0..", kMaxDeviceId));
      continue;
    }
    if (m.measure_case() != tpu_rt::Metric::kGauge) {
      out.skipped.push_back(absl::StrCat(where, "device ", id, " has no gauge"));
      continue;
    }
    std::string why;
    std::optional<double> value = GaugeValue(m.gauge(), kind, &why);
    if (!value) {
      out.skipped.push_back(absl::StrCat(where, "device ", id, " has ", why));
      continue;
    }
    if (!out.values.emplace(id, *value).second) {
      out.skipped.push_back(absl::StrCat(where, "device ", id, " listed twice; the first value is kept"));
    }
  }
  return out;
}

std::map<int, LibtpuChipStats> JoinLibtpuMetrics(const PerDeviceValues& hbm_used, const PerDeviceValues& hbm_total,
                                                 const PerDeviceValues& duty_cycle) {
  std::map<int, LibtpuChipStats> chips;
  for (const auto& [chip, value] : duty_cycle.values) chips[static_cast<int>(chip)].duty_cycle_percent = value;
  const size_t duty_chips = duty_cycle.values.size();
  const size_t devices = std::max(hbm_used.values.size(), hbm_total.values.size());
  const int64_t devices_per_chip = (duty_chips > 0 && devices == 2 * duty_chips) ? 2 : 1;
  auto add = [&](const PerDeviceValues& values, std::optional<int64_t> LibtpuChipStats::*field) {
    for (const auto& [device, value] : values.values) {
      std::optional<int64_t>& slot = chips[static_cast<int>(device / devices_per_chip)].*field;
      slot = slot.value_or(0) + static_cast<int64_t>(value);
    }
  };
  add(hbm_used, &LibtpuChipStats::hbm_used_bytes);
  add(hbm_total, &LibtpuChipStats::hbm_total_bytes);
  return chips;
}

absl::StatusOr<std::vector<int>> ParseMetricsPorts(const char* env_value) {
  if (env_value == nullptr || absl::StripAsciiWhitespace(env_value).empty()) return std::vector<int>{kDefaultLibtpuMetricsPort};
  std::vector<int> ports;
  std::set<int> seen;
  for (absl::string_view entry : absl::StrSplit(env_value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    int port = 0;
    if (!absl::SimpleAtoi(entry, &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("TPU_RUNTIME_METRICS_PORTS: '", std::string(entry),
                                                     "' is not a port; expected comma-separated ports 1-65535, "
                                                     "e.g. 8431,8432"));
    }
    if (seen.insert(port).second) ports.push_back(port);
  }
  return ports;
}

LibtpuClient::LibtpuClient(std::vector<int> ports, std::string host, int64_t deadline_ms)
    : ports_(std::move(ports)), host_(std::move(host)), deadline_ms_(deadline_ms) {}

absl::StatusOr<tpu_rt::MetricResponse> LibtpuClient::Query(tpu_rt::RuntimeMetricService::Stub& stub,
                                                          const char* metric) {
  tpu_rt::MetricRequest request;
  request.set_metric_name(metric);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms_));
  tpu_rt::MetricResponse response;
  grpc::Status status = stub.GetRuntimeMetric(&ctx, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat(metric, ": ", status.error_message()));
  }
  return response;
}

LibtpuPortReading LibtpuClient::Read(int port) {
  LibtpuPortReading reading;
  reading.port = port;
  auto& stub = stubs_[port];
  if (stub == nullptr) {
    // libtpu serves with local credentials; a channel reused across rounds reconnects on its own.
    auto channel = grpc::CreateChannel(absl::StrCat(host_, ":", port),
                                       grpc::experimental::LocalCredentials(LOCAL_TCP));
    stub = tpu_rt::RuntimeMetricService::NewStub(channel);
  }
  struct Wanted {
    const char* name;
    GaugeKind kind;
    PerDeviceValues values;
  };
  Wanted wanted[] = {{kLibtpuHbmUsageMetric, GaugeKind::kInt, {}},
                     {kLibtpuHbmTotalMetric, GaugeKind::kInt, {}},
                     {kLibtpuDutyCycleMetric, GaugeKind::kDouble, {}}};
  for (Wanted& w : wanted) {
    absl::StatusOr<tpu_rt::MetricResponse> response = Query(*stub, w.name);
    if (!response.ok()) {
      if (response.status().code() == absl::StatusCode::kNotFound ||
          response.status().code() == absl::StatusCode::kInvalidArgument) {
        // An older or newer libtpu without this metric: the others still count.
        reading.skipped.push_back(std::string(response.status().message()));
        continue;
      }
      reading.chips = response.status();
      return reading;
    }
    w.values = ParsePerDeviceGauge(*response, w.name, w.kind);
    for (std::string& s : w.values.skipped) reading.skipped.push_back(std::move(s));
  }
  reading.chips = JoinLibtpuMetrics(wanted[0].values, wanted[1].values, wanted[2].values);
  return reading;
}

std::map<int, LibtpuChipStats> MergePortReadings(const std::vector<LibtpuPortReading>& readings,
                                                 std::vector<std::string>* skipped) {
  std::map<int, LibtpuChipStats> merged;
  std::map<int, int> port_of;
  for (const LibtpuPortReading& r : readings) {
    if (!r.chips.ok()) continue;
    for (const auto& [chip, stats] : *r.chips) {
      auto [it, inserted] = port_of.emplace(chip, r.port);
      if (!inserted) {
        if (skipped != nullptr) {
          skipped->push_back(absl::StrCat("chip ", chip, " reported by ports ", it->second, " and ", r.port,
                                          "; port ", it->second, " is kept"));
        }
        continue;
      }
      merged[chip] = stats;
    }
  }
  return merged;
}

}  // namespace torus::metrics
