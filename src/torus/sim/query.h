// A small client of libtpu's RuntimeMetricService (real or simulated), behind `torus-tpu-sim --query HOST:PORT`:
// lists the supported metrics and reads each known one, as JSON
//   {"address": "127.0.0.1:8431",
//    "supported": ["tpu.runtime.hbm.memory.usage.bytes", ...],
//    "metrics": {"tpu.runtime.hbm.memory.usage.bytes": [{"device_id": 0, "value": 2097152000}, ...], ...}}
// A metric the server answers NOT_FOUND for is left out of "metrics".
//
// Thread-safety: thread-safe (no shared state).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tpu/monitoring/runtime/tpu_metric_service.pb.h"

namespace torus::sim {

// Local credentials over TCP, as libtpu's clients use (the server must be on a loopback address).
std::shared_ptr<grpc::ChannelCredentials> LocalTcpChannelCredentials();
std::shared_ptr<grpc::ServerCredentials> LocalTcpServerCredentials();

// Queries `address`; each call has `timeout`. Errors name the address and the failed call.
absl::StatusOr<nlohmann::json> QueryMetrics(const std::string& address, std::chrono::milliseconds timeout);

// One metric's values as JSON: [{"device_id": 0, "value": ...}, ...].
nlohmann::json MetricValuesJson(const tpu::monitoring::runtime::TPUMetric& metric);

}  // namespace torus::sim
