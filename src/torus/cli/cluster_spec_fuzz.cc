// libFuzzer target for the local cluster spec YAML of `torus up SPEC.yaml` (docs/fuzzing.md): the whole input is the
// file, and also a byte size ("16Gi"). Parsing may fail, with InvalidArgument; it must never crash (nor hang: a spec
// is at most 250 hosts), and what parses expands into at most 250 hosts with distinct names and addresses, valid
// labels, and TPU hosts whose injected environment (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES) reads back as their slice's shape. A byte size that parses prints as an integer that parses
// to the same size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "torus/cli/cluster_spec.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckTpuHost(const torus::cli::SimulatedHost& host) {
  Require(host.tpu_chips > 0);
  absl::StatusOr<torus::PodType> pod_type = torus::ParsePodType(host.env.at("TPU_ACCELERATOR_TYPE"));
  Require(pod_type.ok() && pod_type->generation == *host.tpu_generation);
  absl::StatusOr<torus::Topology> topology = torus::ParseTopology(*host.tpu_generation, host.env.at("TPU_TOPOLOGY"));
  Require(topology.ok() && torus::PodTypeFor(*host.tpu_generation, *topology) == *pod_type);
  absl::StatusOr<torus::SliceShape> shape = torus::MakeSliceShape(*host.tpu_generation, *topology, host.tpu_chips);
  Require(shape.ok());
  const std::vector<std::string> hostnames = absl::StrSplit(host.env.at("TPU_WORKER_HOSTNAMES"), ',');
  Require(static_cast<int>(hostnames.size()) == shape->hosts);
  int worker = -1;
  Require(absl::SimpleAtoi(host.env.at("TPU_WORKER_ID"), &worker) && worker >= 0 && worker < shape->hosts);
  Require(hostnames[worker] == host.node_ip);
  Require(torus::ValidateLabelValue("torus.io/tpu-slice-name", host.env.at("TPU_NAME")).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);

  if (absl::StatusOr<int64_t> bytes = torus::cli::ParseByteSize(input); bytes.ok()) {
    Require(*bytes >= 0 && *bytes <= (int64_t{1} << 50));
    absl::StatusOr<int64_t> again = torus::cli::ParseByteSize(std::to_string(*bytes));
    Require(again.ok() && *again == *bytes);
  }

  absl::StatusOr<torus::cli::ClusterSpec> spec = torus::cli::ParseClusterSpec(input);
  if (!spec.ok()) {
    Require(spec.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const std::vector<torus::cli::SimulatedHost> hosts = torus::cli::ExpandClusterSpec(*spec);
  Require(!hosts.empty() && hosts.size() <= 250 && hosts.front().name == "head");
  std::set<std::string> names, addresses;
  for (const torus::cli::SimulatedHost& host : hosts) {
    Require(names.insert(host.name).second);
    Require(addresses.insert(host.node_ip).second);
    for (const auto& [key, value] : host.labels) {
      Require(torus::ValidateLabelKey(key).ok() && torus::ValidateLabelValue(key, value).ok());
    }
    if (host.tpu_generation) CheckTpuHost(host);
  }
  return 0;
}
