// What an ingress running apart from the head (`torus serve ingress`) exchanges with it over the head's HTTP API: the
// routes, read from GET /api/v0/services (each service's prefix, limits and READY replicas), and the load it carries,
// sent as POST /api/v0/services/load so that the head scales services on every ingress's requests.
//
// Load body: {"ingress": "10.0.0.5:8000", "services": {"llm": {"in_flight": 3, "queued": 0,
//             "replicas": {"run-x1": 2, "run-x2": 1}}}}
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "torus/serve/route_table.h"

namespace torus::serve {

// The routes of a GET /api/v0/services answer: every service with its READY replicas (state READY and an address).
// InvalidArgument names what is missing or malformed.
absl::StatusOr<std::vector<ServiceRoute>> RoutesFromServicesJson(const nlohmann::json& services);

struct IngressLoad {
  std::string ingress;  // who reports: its host:port
  std::map<std::string, ServiceLoad> services;  // in_flight, queued and replicas set; served left empty
};

std::string IngressLoadToJson(const IngressLoad& load);
// InvalidArgument naming the field for a malformed body; counts must be 0..1,000,000.
absl::StatusOr<IngressLoad> IngressLoadFromJson(absl::string_view text);

}  // namespace torus::serve
