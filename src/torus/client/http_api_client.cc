#include "torus/client/http_api_client.h"

#include <httplib.h>

#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace torus::client {
namespace {

using nlohmann::json;

// Percent-encodes a path segment or query value.
std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

// The JSON of a 2xx answer, else the error the status maps to (see the header).
absl::StatusOr<json> InterpretAnswer(int status, const std::string& text) {
  auto body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (status >= 200 && status < 300) {
    if (body.is_discarded()) return absl::InternalError("the head answered with something that is not JSON");
    return body;
  }
  std::string message = !body.is_discarded() && body.is_object() && body.contains("error") && body["error"].is_string()
                            ? body["error"].get<std::string>()
                            : text;
  switch (status) {
    case 400: return absl::InvalidArgumentError(message);
    case 401: return absl::UnauthenticatedError(message);
    case 404: return absl::NotFoundError(message);
    case 409: return absl::FailedPreconditionError(message);
    case 410: return absl::OutOfRangeError(message);
    case 413: return absl::ResourceExhaustedError(message);
    case 503: return absl::UnavailableError(message);
    default: return absl::InternalError(absl::StrCat("HTTP ", status, ": ", message));
  }
}

absl::StatusOr<json> Interpret(const httplib::Result& result, const std::string& address) {
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("head HTTP API at ", address, " is not reachable: ", httplib::to_string(result.error())));
  }
  return InterpretAnswer(result->status, result->body);
}

// Reads typed fields out of an answer; a missing field or a wrong type is the head's bug, reported as Internal.
template <typename T, typename Read>
absl::StatusOr<T> Extract(const absl::StatusOr<json>& answer, const std::string& what, Read read) {
  if (!answer.ok()) return answer.status();
  try {
    return read(*answer);
  } catch (const json::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected answer from the head to ", what, ": ", e.what()));
  }
}

json JobBody(const JobSubmission& job) {
  json body = {{"entrypoint", job.entrypoint}};
  if (!job.submission_id.empty()) body["submission_id"] = job.submission_id;
  json runtime_env = json::object();
  if (!job.env_vars.empty()) runtime_env["env_vars"] = job.env_vars;
  if (!job.working_dir.empty()) runtime_env["working_dir"] = job.working_dir;
  if (!job.py_modules.empty()) runtime_env["py_modules"] = job.py_modules;
  if (!runtime_env.empty()) body["runtime_env"] = std::move(runtime_env);
  if (!job.resources.empty()) body["entrypoint_resources"] = job.resources;
  if (!job.label_selector.empty()) body["entrypoint_label_selector"] = job.label_selector;
  if (!job.metadata.empty()) body["metadata"] = job.metadata;
  return body;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpApiClient>> HttpApiClient::Connect(const HeadEndpoint& endpoint) {
  if (endpoint.address.empty()) {
    return absl::InvalidArgumentError("the head's HTTP address is empty; expected HOST:PORT");
  }
  return std::unique_ptr<HttpApiClient>(new HttpApiClient(endpoint));
}

namespace {

// "https://" + address with the cluster CA when `tls_ca` is set (the head's certificate names the hosts it is reached
// at), else "http://" + address.
std::shared_ptr<httplib::Client> NewClient(const std::string& address, const std::string& tls_ca) {
  auto client = std::make_shared<httplib::Client>((tls_ca.empty() ? "http://" : "https://") + address);
  if (!tls_ca.empty()) {
    client->set_ca_cert_path(tls_ca.c_str());
    client->enable_server_certificate_verification(true);
  }
  return client;
}

std::shared_ptr<httplib::Client> NewConnection(const std::string& address, const std::string& token,
                                               const std::string& tls_ca) {
  auto client = NewClient(address, tls_ca);
  client->set_bearer_token_auth(token.c_str());
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(60, 0);
  client->set_keep_alive(true);
  // A request's headers and body go out as separate writes; without this the body waits for the head's delayed
  // acknowledgement of the headers (~40 ms) on a kept-alive connection.
  client->set_tcp_nodelay(true);
  return client;
}

}  // namespace

HttpApiClient::HttpApiClient(const HeadEndpoint& endpoint)
    : token_(endpoint.token),
      address_file_(endpoint.address_file),
      tls_ca_(endpoint.tls_ca),
      address_(endpoint.address),
      client_(NewConnection(endpoint.address, endpoint.token, endpoint.tls_ca)) {}

HttpApiClient::~HttpApiClient() = default;

std::string HttpApiClient::address() const { return Current().second; }

std::pair<std::shared_ptr<httplib::Client>, std::string> HttpApiClient::Current() const {
  absl::MutexLock lock(&mu_);
  return {client_, address_};
}

bool HttpApiClient::FollowMovedHead(const std::string& tried) {
  if (address_file_.empty()) return false;
  auto now = ReadTrimmed(address_file_);
  if (!now.ok() || now->empty()) return false;
  absl::MutexLock lock(&mu_);
  if (*now == tried) return false;
  if (*now != address_) {
    address_ = *now;
    client_ = NewConnection(address_, token_, tls_ca_);
  }
  return true;
}

absl::StatusOr<json> HttpApiClient::Send(const std::function<httplib::Result(httplib::Client&)>& call) {
  auto [client, address] = Current();
  httplib::Result result = call(*client);
  // Connect failed: the request never reached a head, so it may go to the one that leads now.
  if (!result && result.error() == httplib::Error::Connection && FollowMovedHead(address)) {
    std::tie(client, address) = Current();
    result = call(*client);
  }
  return Interpret(std::move(result), address);
}

absl::StatusOr<json> HttpApiClient::Get(const std::string& path) {
  return Send([&](httplib::Client& c) { return c.Get(path); });
}

absl::StatusOr<json> HttpApiClient::Post(const std::string& path, const std::string& json_body) {
  return Send([&](httplib::Client& c) { return c.Post(path, json_body, "application/json"); });
}

absl::StatusOr<json> HttpApiClient::Delete(const std::string& path) {
  return Send([&](httplib::Client& c) { return c.Delete(path); });
}

absl::StatusOr<std::string> HttpApiClient::SubmitJob(const JobSubmission& job) {
  return Extract<std::string>(Post("/api/jobs/", JobBody(job).dump()), "a job submission",
                              [](const json& j) { return j.at("submission_id").get<std::string>(); });
}

absl::StatusOr<bool> HttpApiClient::PackageExists(const std::string& name) {
  auto answer = Get("/api/packages/gcs/" + UrlEncode(name));
  if (answer.ok()) return true;
  if (absl::IsNotFound(answer.status())) return false;
  return answer.status();
}

absl::StatusOr<bool> HttpApiClient::PutPackage(const std::string& name, const std::string& bytes) {
  return Extract<bool>(Send([&](httplib::Client& c) {
                         return c.Put("/api/packages/gcs/" + UrlEncode(name), bytes, "application/zip");
                       }),
                       "a package upload", [](const json& j) { return j.at("stored").get<bool>(); });
}

absl::StatusOr<json> HttpApiClient::ListActors(const std::string& state, const std::string& job_id) {
  std::string path = "/api/v0/actors";
  std::string sep = "?";
  if (!state.empty()) {
    path += sep + "state=" + UrlEncode(state);
    sep = "&";
  }
  if (!job_id.empty()) path += sep + "job_id=" + UrlEncode(job_id);
  return Get(path);
}

absl::StatusOr<json> HttpApiClient::ListTasks(const std::string& state, const std::string& job_id,
                                              const std::string& name, int limit) {
  std::string path = "/api/v0/tasks?limit=" + std::to_string(limit);
  if (!state.empty()) path += "&state=" + UrlEncode(state);
  if (!job_id.empty()) path += "&job_id=" + UrlEncode(job_id);
  if (!name.empty()) path += "&name=" + UrlEncode(name);
  return Get(path);
}

absl::StatusOr<json> HttpApiClient::TaskSummary() { return Get("/api/v0/tasks/summary"); }

absl::StatusOr<json> HttpApiClient::Autoscaler() { return Get("/api/v0/autoscaler"); }

absl::StatusOr<json> HttpApiClient::DeployService(const std::string& spec_text) {
  return Send([&](httplib::Client& c) { return c.Post("/api/v0/services", spec_text, "application/yaml"); });
}

absl::StatusOr<json> HttpApiClient::GetService(const std::string& name) {
  return Get("/api/v0/services/" + UrlEncode(name));
}

absl::StatusOr<json> HttpApiClient::ListServices() { return Get("/api/v0/services"); }

absl::Status HttpApiClient::ReportServiceLoad(const std::string& load_json) {
  return Post("/api/v0/services/load", load_json).status();
}

absl::Status HttpApiClient::DeleteService(const std::string& name) {
  return Delete("/api/v0/services/" + UrlEncode(name)).status();
}

absl::StatusOr<json> HttpApiClient::GetJob(const std::string& id) { return Get("/api/jobs/" + UrlEncode(id)); }

absl::StatusOr<json> HttpApiClient::ListJobs() { return Get("/api/jobs/"); }

absl::StatusOr<bool> HttpApiClient::StopJob(const std::string& id) {
  return Extract<bool>(Post("/api/jobs/" + UrlEncode(id) + "/stop", "{}"), "a job stop",
                       [](const json& j) { return j.at("stopped").get<bool>(); });
}

absl::Status HttpApiClient::DeleteJob(const std::string& id) {
  return Delete("/api/jobs/" + UrlEncode(id)).status();
}

absl::StatusOr<JobLogChunk> HttpApiClient::ReadJobLog(const std::string& id, int64_t offset, int64_t wait_ms) {
  std::string path = absl::StrCat("/api/v0/jobs/", UrlEncode(id), "/logs?offset=", offset);
  if (wait_ms > 0) absl::StrAppend(&path, "&wait_ms=", wait_ms);
  return Extract<JobLogChunk>(Get(path),
                              "a job log read", [](const json& j) {
                                return JobLogChunk{j.at("data").get<std::string>(), j.at("next_offset").get<int64_t>(),
                                                   j.at("finished").get<bool>(), j.at("status").get<std::string>()};
                              });
}

absl::StatusOr<std::string> HttpApiClient::JobLogs(const std::string& id) {
  return Extract<std::string>(Get("/api/jobs/" + UrlEncode(id) + "/logs"), "a job log read",
                              [](const json& j) { return j.at("logs").get<std::string>(); });
}

absl::StatusOr<SubmittedRun> HttpApiClient::SubmitRun(const train::RunSpec& spec) {
  return Extract<SubmittedRun>(Post("/api/v0/runs", train::RunSpecToJson(spec)), "a run submission",
                               [](const json& j) {
                                 const json& name = j.at("name");
                                 return SubmittedRun{j.at("run_id").get<std::string>(),
                                                     name.is_null() ? "" : name.get<std::string>()};
                               });
}

absl::StatusOr<json> HttpApiClient::GetRun(const std::string& id_or_name) {
  return Get("/api/v0/runs/" + UrlEncode(id_or_name));
}

absl::StatusOr<json> HttpApiClient::ListRuns() { return Get("/api/v0/runs"); }

absl::StatusOr<bool> HttpApiClient::StopRun(const std::string& id_or_name) {
  return Extract<bool>(Post("/api/v0/runs/" + UrlEncode(id_or_name) + "/stop", "{}"), "a run stop",
                       [](const json& j) { return j.at("stopped").get<bool>(); });
}

absl::StatusOr<RunLogs> HttpApiClient::ReadRunLogs(const std::string& id_or_name, int attempt,
                                                   const std::vector<int64_t>& offsets, int64_t wait_ms) {
  std::string path = absl::StrCat("/api/v0/runs/", UrlEncode(id_or_name), "/logs?ranks=all&attempt=", attempt);
  if (!offsets.empty()) absl::StrAppend(&path, "&offsets=", absl::StrJoin(offsets, ","));
  if (wait_ms > 0) absl::StrAppend(&path, "&wait_ms=", wait_ms);
  return Extract<RunLogs>(Get(path), "a run log read", [](const json& j) {
    RunLogs logs{j.at("attempt").get<int>(), {}};
    for (const json& r : j.at("ranks")) {
      if (r.contains("error")) {
        logs.ranks.push_back(absl::UnavailableError(r.at("error").get<std::string>()));
      } else {
        logs.ranks.push_back(RunLogChunk{r.at("data").get<std::string>(), r.at("next_offset").get<int64_t>(),
                                         r.at("finished").get<bool>()});
      }
    }
    return logs;
  });
}

absl::StatusOr<RunLogChunk> HttpApiClient::ReadRunLog(const std::string& id_or_name, int rank, int attempt,
                                                      int64_t offset, int64_t wait_ms) {
  return Extract<RunLogChunk>(Get(absl::StrCat("/api/v0/runs/", UrlEncode(id_or_name), "/logs?rank=", rank,
                                               "&attempt=", attempt, "&offset=", offset,
                                               wait_ms > 0 ? absl::StrCat("&wait_ms=", wait_ms) : "")),
                              "a run log read", [](const json& j) {
                                return RunLogChunk{j.at("data").get<std::string>(), j.at("next_offset").get<int64_t>(),
                                                   j.at("finished").get<bool>()};
                              });
}

}  // namespace torus::client

namespace torus::client {
namespace {

// Splits a server-sent event stream into events: blocks of "field: value" lines ended by a blank line.
class SseParser {
 public:
  struct Message {
    std::string event;
    std::string data;
  };
  // Adds bytes; calls `on` for each whole event, stopping (false) when `on` does.
  bool Feed(const char* data, size_t n, const std::function<bool(const Message&)>& on) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      Message m;
      size_t pos = 0;
      while (pos < end) {
        size_t nl = std::min(buffer_.find('\n', pos), end);
        std::string_view line(buffer_.data() + pos, nl - pos);
        if (line.rfind("event: ", 0) == 0) m.event = std::string(line.substr(7));
        if (line.rfind("data: ", 0) == 0) m.data += std::string(line.substr(6));
        pos = nl + 1;
      }
      buffer_.erase(0, end + 2);
      if (!on(m)) return false;
    }
    return true;
  }

 private:
  std::string buffer_;
};

std::string JoinForQuery(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) absl::StrAppend(&out, out.empty() ? "" : ",", UrlEncode(item));
  return out;
}

}  // namespace

absl::StatusOr<EventCursor> HttpApiClient::EventsNow() {
  return Extract<EventCursor>(Get("/api/v0/events/revision"), "an events read", [](const json& j) {
    return EventCursor{j.at("epoch").get<uint64_t>(), j.at("revision").get<uint64_t>()};
  });
}

namespace {

std::string EventQuery(const EventCursor& from, const EventSelector& selector) {
  std::string query = absl::StrCat("since=", from.revision);
  if (from.epoch != 0) absl::StrAppend(&query, "&epoch=", from.epoch);
  if (!selector.kinds.empty()) absl::StrAppend(&query, "&kind=", JoinForQuery(selector.kinds));
  if (!selector.ids.empty()) absl::StrAppend(&query, "&id=", JoinForQuery(selector.ids));
  return query;
}

}  // namespace

absl::StatusOr<std::vector<json>> HttpApiClient::WaitEvents(EventCursor* from, const EventSelector& selector,
                                                            int64_t wait_ms) {
  auto answer = Get(absl::StrCat("/api/v0/events?", EventQuery(*from, selector), "&wait_ms=", wait_ms));
  return Extract<std::vector<json>>(answer, "an events read", [from](const json& j) {
    std::vector<json> events = j.at("events").get<std::vector<json>>();
    from->epoch = j.at("epoch").get<uint64_t>();
    from->revision = j.at("revision").get<uint64_t>();
    return events;
  });
}

absl::Status HttpApiClient::WatchEvents(EventCursor* from, const EventSelector& selector,
                                        const std::function<bool(const json& event)>& on_event) {
  const std::string path = absl::StrCat("/api/v0/events?watch=1&", EventQuery(*from, selector));
  // A connection of its own: the stream holds it, and the head sends a progress mark every 10 s.
  const std::string address = this->address();
  std::shared_ptr<httplib::Client> connection = NewClient(address, tls_ca_);
  httplib::Client& stream = *connection;
  stream.set_bearer_token_auth(token_.c_str());
  stream.set_connection_timeout(5, 0);
  stream.set_read_timeout(30, 0);
  stream.set_tcp_nodelay(true);
  SseParser parser;
  absl::Status status = absl::OkStatus();
  bool stopped = false;
  int http_status = 0;
  std::string error_body;
  auto result = stream.Get(
      path,
      [&](const httplib::Response& response) {
        http_status = response.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (http_status != 200) {
          error_body.append(data, n);
          return true;
        }
        return parser.Feed(data, n, [&](const SseParser::Message& m) {
          auto body = json::parse(m.data, nullptr, /*allow_exceptions=*/false);
          if (body.is_discarded() || !body.is_object()) {
            status = absl::InternalError("the head sent an event that is not a JSON object: " + m.data);
            return false;
          }
          if (m.event == "hello") {
            from->epoch = body.value("epoch", from->epoch);
            from->revision = body.value("revision", from->revision);
            return true;
          }
          if (m.event == "progress") {
            from->revision = std::max(from->revision, body.value("revision", from->revision));
            return true;
          }
          if (m.event == "error") {
            status = InterpretAnswer(body.value("code", 500), m.data).status();
            return false;
          }
          from->revision = std::max(from->revision, body.value("revision", from->revision));
          if (!on_event(body)) {
            stopped = true;
            return false;
          }
          return true;
        });
      });
  if (stopped) return absl::OkStatus();
  if (!status.ok()) return status;
  if (http_status != 0 && http_status != 200) return InterpretAnswer(http_status, error_body).status();
  return absl::UnavailableError(absl::StrCat("the event stream from the head at ", address, " broke: ",
                                             result ? "it ended" : httplib::to_string(result.error())));
}

}  // namespace torus::client
