// torus serve deploy | status | list | delete, over the head's HTTP API (/api/v0/services).
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "torus/cli/command_util.h"
#include "torus/cli/commands.h"
#include "torus/common/termination.h"
#include "torus/serve/ingress.h"
#include "torus/serve/remote_routes.h"

namespace torus::cli {
namespace {

void PrintService(const nlohmann::json& s) {
  std::cout << s.value("name", "") << "  " << s.value("status", "") << "  version " << s.value("version", 0) << "  "
            << s.value("ready_replicas", 0) << "/" << s.value("target_replicas", 0) << " READY  "
            << s.value("url", "") << "\n";
}

// The spec with its relative working_dir and py_modules (directories beside the spec file) uploaded and replaced by
// their package URIs; absolute paths (on the nodes) and package URIs stay as they are. Unchanged text when there is
// nothing to upload, so that the head's errors name the user's own lines.
absl::StatusOr<std::string> UploadSpecLocations(client::HttpApiClient& http, const std::string& path,
                                                const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return text;  // the head says what is wrong with it
  }
  if (!root.IsMap()) return text;
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  auto local = [](const YAML::Node& n) {
    return n.IsScalar() && !n.Scalar().empty() && n.Scalar()[0] != '/' && n.Scalar().rfind("gcs://", 0) != 0;
  };
  bool changed = false;
  if (root["working_dir"] && local(root["working_dir"])) {
    auto up = UploadLocations(http, (base / root["working_dir"].Scalar()).lexically_normal().string(), {}, {});
    if (!up.ok()) return absl::InvalidArgumentError(absl::StrCat("working_dir: ", up.status().message()));
    root["working_dir"] = up->working_dir;
    changed = true;
  }
  if (root["py_modules"] && root["py_modules"].IsSequence()) {
    for (size_t i = 0; i < root["py_modules"].size(); ++i) {
      YAML::Node m = root["py_modules"][i];
      if (!local(m)) continue;
      auto up = UploadLocations(http, "", {(base / m.Scalar()).lexically_normal().string()}, {});
      if (!up.ok()) return absl::InvalidArgumentError(absl::StrCat("py_modules[", i, "]: ", up.status().message()));
      root["py_modules"][i] = up->py_modules[0];
      changed = true;
    }
  }
  if (!changed) return text;
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str());
}

}  // namespace

int CmdServeDeploy(const HeadFlags& head, const std::string& path, bool wait, int timeout_s) {
  const std::string command = "serve deploy";
  std::ifstream in(path);
  if (!in) return FailCommand(command, absl::InvalidArgumentError(absl::StrCat("cannot read ", path)));
  std::stringstream text;
  text << in.rdbuf();
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand(command, http.status());
  auto spec = UploadSpecLocations(**http, path, text.str());
  if (!spec.ok()) return FailCommand(command, absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message())));
  auto deployed = (*http)->DeployService(*spec);
  if (!deployed.ok()) {
    return FailCommand(command, absl::Status(deployed.status().code(),
                                             absl::StrCat(path, ": ", deployed.status().message())));
  }
  const std::string name = deployed->value("name", "");
  std::cout << "service " << name << " "
            << (deployed->value("changed", false) ? absl::StrCat("deployed: version ", deployed->value("version", 0))
                                                   : absl::StrCat("unchanged at version ", deployed->value("version", 0)))
            << "\n";
  if (!wait) return 0;
  // Until every wanted replica of this version is READY and no older one is left.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::string last;
  while (true) {
    auto s = (*http)->GetService(name);
    if (!s.ok()) return FailCommand(command, s.status());
    const std::string status = s->value("status", "");
    const std::string line = absl::StrCat(status, ": ", s->value("ready_replicas", 0), "/",
                                          s->value("target_replicas", 0), " replicas READY");
    if (line != last) std::cerr << line << "\n";
    last = line;
    if (status == "RUNNING") {
      std::cout << "serving at " << s->value("url", "") << "\n";
      return 0;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return FailCommand(command, absl::DeadlineExceededError(absl::StrCat(
                                      "service ", name, " is not RUNNING after ", timeout_s, " s (", line,
                                      "); see `torus serve status ", name, "`")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

int CmdServeStatus(const HeadFlags& head, const std::string& name, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("serve status", http.status());
  auto s = (*http)->GetService(name);
  if (!s.ok()) return FailCommand("serve status", s.status());
  if (json) {
    std::cout << s->dump(2) << "\n";
    return 0;
  }
  PrintService(*s);
  std::cout << "  route " << s->value("route_prefix", "") << "  queued requests " << s->value("queued_requests", 0)
            << "\n";
  for (const auto& r : (*s)["replicas"]) {
    std::cout << "  " << r.value("run_id", "") << "  " << r.value("name", "") << "  v" << r.value("version", 0)
              << "  " << r.value("state", "") << "  " << r.value("address", "-") << "  in flight "
              << r.value("in_flight", 0) << "  requests " << r.value("requests", 0) << "\n";
  }
  if (!(*s)["events"].empty()) std::cout << "  events:\n";
  for (const auto& e : (*s)["events"]) std::cout << "    " << e.get<std::string>() << "\n";
  return 0;
}

int CmdServeList(const HeadFlags& head, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("serve list", http.status());
  auto services = (*http)->ListServices();
  if (!services.ok()) return FailCommand("serve list", services.status());
  if (json) {
    std::cout << services->dump(2) << "\n";
    return 0;
  }
  for (const auto& s : *services) PrintService(s);
  return 0;
}

int CmdServeDelete(const HeadFlags& head, const std::string& name) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("serve delete", http.status());
  if (absl::Status s = (*http)->DeleteService(name); !s.ok()) return FailCommand("serve delete", s);
  std::cout << "service " << name << " deleted; its replicas drain and stop\n";
  return 0;
}

int CmdServeIngress(const HeadFlags& head, const std::string& host, int port) {
  const std::string command = "serve ingress";
  // SIGTERM and SIGINT are taken below, as the daemons do: blocked before any thread starts.
  BlockTerminationSignals();
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand(command, http.status());
  serve::RouteTable routes;
  serve::Ingress ingress(&routes, {.host = host, .port = port});
  auto bound = ingress.Start();
  if (!bound.ok()) return FailCommand(command, bound.status());
  const std::string self = absl::StrCat(host, ":", *bound);
  std::cout << "torus serve ingress: listening on http://" << self << "\n" << std::flush;
  // Every 0.5 s: the routes from the head, and this ingress's load to it. A head that does not answer leaves the
  // routes as they were (requests keep going to the replicas last known READY).
  std::string last_error;
  while (PollTerminationSignal(500) == 0) {
    auto services = (*http)->ListServices();
    absl::Status s = services.ok() ? absl::OkStatus() : services.status();
    if (s.ok()) {
      auto next = serve::RoutesFromServicesJson(*services);
      if (next.ok()) {
        routes.Set(*std::move(next));
      } else {
        s = next.status();
      }
    }
    serve::IngressLoad load{self, routes.Load()};
    for (auto& [name, l] : load.services) l.served.clear();
    if (s.ok()) s = (*http)->ReportServiceLoad(serve::IngressLoadToJson(load));
    const std::string error = s.ok() ? "" : std::string(s.message());
    if (error != last_error && !error.empty()) std::cerr << "torus serve ingress: the head: " << error << "\n";
    last_error = error;
  }
  routes.Stop();
  ingress.Stop();
  return 0;
}

}  // namespace torus::cli
