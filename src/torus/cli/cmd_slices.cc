// torus node add-slice | remove-slice: the local autoscaler provider's commands (the head runs them; an operator may
// too). A slice's hosts are simulated TPU hosts of one of the session's node types (<session>/autoscaler.yaml),
// started and stopped together.
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "torus/autoscale/config.h"
#include "torus/cli/commands.h"
#include "torus/cli/daemons.h"
#include "torus/cli/session_dir.h"
#include "torus/cli/sim_hosts.h"
#include "torus/client/session.h"
#include "torus/common/yaml_fields.h"

namespace torus::cli {
namespace {

absl::StatusOr<std::string> SessionOf(const std::string& given) {
  if (!given.empty()) return given;
  return client::LatestSessionDir(client::TempRoot());
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `count` loopback addresses no other host of the session has: 127.0.2.1 upward (`torus up` gives 127.0.1.x), from a
// counter under a lock, so that slices launched at once get different ones.
absl::StatusOr<std::vector<std::string>> AllocateAddresses(const std::string& session, int count) {
  const std::string path = session + "/autoscaler/next_address";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path));
  flock(fd, LOCK_EX);
  char buffer[32] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  int next = 0;
  if (n > 0) (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, static_cast<size_t>(n))), &next);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i, ++next) out.push_back(absl::StrCat("127.0.", 2 + next / 254, ".", 1 + next % 254));
  const std::string text = absl::StrCat(next, "\n");
  const bool written = ftruncate(fd, 0) == 0 && pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
  close(fd);  // releases the lock
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  if (2 + next / 254 > 255) return absl::ResourceExhaustedError("the session has used every loopback address");
  return out;
}

// Whether `name` is "<slice>-w<digits>".
bool IsHostOf(const std::string& name, const std::string& slice) {
  absl::string_view rest(name);
  if (!absl::ConsumePrefix(&rest, slice + "-w") || rest.empty()) return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

int CmdNodeAddSlice(const AddSliceFlags& flags) {
  auto session = SessionOf(flags.session);
  if (!session.ok()) {
    std::cerr << "torus node add-slice: " << session.status().message() << "\n";
    return 1;
  }
  auto text = ReadFile(*session + "/autoscaler.yaml");
  if (!text.ok()) {
    std::cerr << "torus node add-slice: " << text.status().message()
              << " (a session's node types come from the node_types of its `torus up` spec)\n";
    return 2;
  }
  auto config = autoscale::ParseAutoscalerConfig(*text);
  if (!config.ok()) {
    std::cerr << "torus node add-slice: " << *session << "/autoscaler.yaml: " << config.status().message() << "\n";
    return 2;
  }
  const autoscale::NodeType* type = config->Find(flags.node_type);
  if (type == nullptr) {
    std::vector<std::string> names;
    for (const auto& t : config->node_types) names.push_back(t.name);
    std::cerr << "torus node add-slice: --node-type \"" << flags.node_type << "\" is not a node type of this session; "
              << "known: " << (names.empty() ? "none" : absl::StrJoin(names, ", ")) << "\n";
    return 2;
  }
  auto capacity_class = autoscale::ParseCapacityClass(flags.capacity_class);
  if (!capacity_class.ok()) {
    std::cerr << "torus node add-slice: --capacity-class: " << capacity_class.status().message() << "\n";
    return 2;
  }
  if (!ValidGroupName(flags.slice) || flags.slice.rfind(type->name + "-", 0) != 0) {
    std::cerr << "torus node add-slice: slice name \"" << flags.slice << "\" must start with \"" << type->name
              << "-\" and be 1-40 of a-z, 0-9 and '-'\n";
    return 2;
  }
  for (const ProcessRecord& r : ReadProcesses(*session)) {
    if (IsHostOf(r.name, flags.slice) && IsTorusProcess(r.pid)) {
      std::cerr << "torus node add-slice: slice " << flags.slice << " runs already (host " << r.name << ", pid "
                << r.pid << ")\n";
      return 1;
    }
  }
  // `torus down` stops a launch under way (role "launch") before the hosts it has started.
  if (absl::Status s = RecordProcess(*session, {"launch", flags.slice, getpid()}); !s.ok()) {
    std::cerr << "torus node add-slice: " << s.message() << "\n";
    return 1;
  }
  auto head_address = ReadFile(*session + "/head_address");
  if (!head_address.ok()) {
    std::cerr << "torus node add-slice: " << head_address.status().message() << " (no head in this session?)\n";
    return 1;
  }
  std::vector<autoscale::HostPlan> plans = autoscale::SliceHosts(*type, flags.slice, *capacity_class);
  auto addresses = AllocateAddresses(*session, static_cast<int>(plans.size()));
  if (!addresses.ok()) {
    std::cerr << "torus node add-slice: " << addresses.status().message() << "\n";
    return 1;
  }
  std::vector<SimulatedHost> hosts;
  for (size_t i = 0; i < plans.size(); ++i) {
    SimulatedHost h;
    h.name = plans[i].name;
    h.group = type->name;
    h.node_ip = (*addresses)[i];
    h.num_cpus = type->num_cpus;
    h.memory_bytes = type->memory_bytes;
    h.labels = type->labels;  // the rest come from the environment, through detection
    h.env = plans[i].env;
    h.env["TPU_WORKER_HOSTNAMES"] = absl::StrJoin(*addresses, ",");
    h.tpu_generation = type->shape.generation;
    h.tpu_chips = type->shape.chips_per_host;
    hosts.push_back(std::move(h));
  }
  auto started = StartSimulatedHosts(*session, std::string(absl::StripAsciiWhitespace(*head_address)), hosts, {});
  if (!started.ok()) {
    std::cerr << "torus node add-slice: " << started.status().message() << "\n";
    return 1;
  }
  std::cout << "slice " << flags.slice << " (" << type->shape.pod_type.ToString() << ", "
            << flags.capacity_class << "): started " << started->size() << " hosts\n";
  return 0;
}

int CmdAutoscalerCheck(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    std::cerr << "torus autoscaler check: " << text.status().message() << "\n";
    return 2;
  }
  auto config = autoscale::ParseAutoscalerConfig(*text);
  if (!config.ok()) {
    std::cerr << "torus autoscaler check: " << path << ": " << config.status().message() << "\n";
    return 2;
  }
  std::cout << "provider " << (config->provider == autoscale::ProviderKind::kLocal ? "local" : "kubernetes") << ", "
            << config->node_types.size() << " node type" << (config->node_types.size() == 1 ? "" : "s") << "\n";
  for (const autoscale::NodeType& t : config->node_types) {
    std::vector<std::string> classes;
    for (const auto& c : t.classes) {
      classes.push_back(absl::StrCat(std::string(autoscale::CapacityClassName(c.capacity_class)), " (",
                                     c.provisioning_timeout_ms / 1000, " s)"));
    }
    std::cout << "  " << t.name << ": " << t.shape.pod_type.ToString() << " " << t.shape.topology.ToString() << ", "
              << t.shape.hosts << (t.shape.hosts == 1 ? " host of " : " hosts of ") << t.shape.chips_per_host << " chips, " << t.min_slices << "-"
              << t.max_slices << " slices, classes " << absl::StrJoin(classes, " > ") << "\n";
  }
  return 0;
}

int CmdNodeRemoveSlice(const std::string& slice, const std::string& session_flag) {
  auto session = SessionOf(session_flag);
  if (!session.ok()) {
    std::cerr << "torus node remove-slice: " << session.status().message() << "\n";
    return 1;
  }
  // Agents first (they unregister while their simulators still serve), then the simulators.
  std::vector<pid_t> agents, sims;
  for (const ProcessRecord& r : ReadProcesses(*session)) {
    if (!IsHostOf(r.name, slice)) continue;
    (r.role == "sim" ? sims : agents).push_back(r.pid);
  }
  const int stopped = StopProcesses(agents, std::chrono::seconds(5)) + StopProcesses(sims, std::chrono::seconds(5));
  std::cout << "slice " << slice << ": stopped " << stopped << " process" << (stopped == 1 ? "" : "es") << "\n";
  return 0;
}

}  // namespace torus::cli
