// HttpApiClient: the C++ API to the head's HTTP API for jobs (the Ray Jobs REST API) and gang runs, with the
// cluster token. Client (client.h) covers the rest over gRPC.
//
// Example:
//   auto endpoint = torus::client::ResolveHttp(std::nullopt, std::nullopt, torus::client::TempRoot());
//   auto http = torus::client::HttpApiClient::Connect(*endpoint);
//   auto id = (*http)->SubmitJob({.entrypoint = "echo hello"});
//   auto chunk = (*http)->ReadJobLog(*id, 0);
//
// Views of jobs and runs come back as JSON: that JSON is the public REST schema (Ray's JobDetails for jobs; a run
// as /api/v0/runs/{id} serves it, docs/rest.md).
//
// Errors: the head's message (its {"error": ...} or its text body), with the code mapped from the HTTP status:
// 400 InvalidArgument, 401 Unauthenticated, 404 NotFound, 409 FailedPrecondition, 410 OutOfRange, 503 Unavailable, other
// Internal ("HTTP 500: ..."); Unavailable "head HTTP API at HOST:PORT is not reachable: ..." when no answer comes
// (a head that is down or restarting); Internal when a 2xx answer is not the JSON expected.
//
// A head that moves: when the endpoint came from a session's dashboard_address and the head cannot be connected to,
// the client reads that file again; if it names another address (a standby head that took over), the request goes
// there. Only requests that never reached a head are sent again, so a change is never made twice.
//
// Thread-safety: thread-safe; cpp-httplib serializes the requests on the one keep-alive connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "torus/client/events.h"
#include "torus/client/session.h"
#include "torus/train/run_spec.h"

namespace httplib {
class Client;
class Result;
}

namespace torus::client {

// A job to submit (POST /api/jobs/). Empty fields are left out of the request.
struct JobSubmission {
  std::string entrypoint;                        // a shell command (/bin/sh -c)
  std::string submission_id;                     // empty: the head picks one
  std::map<std::string, std::string> env_vars;   // runtime_env.env_vars
  std::string working_dir;                       // runtime_env.working_dir: a package URI or a path on the node
  std::vector<std::string> py_modules;           // runtime_env.py_modules: likewise
  std::map<std::string, double> resources;       // entrypoint_resources: name -> amount
  std::map<std::string, std::string> label_selector;  // entrypoint_label_selector: label key -> expression
  std::map<std::string, std::string> metadata;
};

// The next piece of a job's output (GET /api/v0/jobs/{id}/logs?offset=N).
struct JobLogChunk {
  std::string data;
  int64_t next_offset = 0;
  bool finished = false;  // the job's output is complete (nothing will follow next_offset)
  std::string status;     // the job's status: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED (UNKNOWN if gone)
};

// The next piece of one rank's output in one attempt of a run (GET /api/v0/runs/{id}/logs).
struct RunLogChunk {
  std::string data;
  int64_t next_offset = 0;
  bool finished = false;  // that worker's output is complete
};

// Every rank's output of one attempt: ranks[r] is rank r's chunk, or why it could not be read.
struct RunLogs {
  int attempt = 0;
  std::vector<absl::StatusOr<RunLogChunk>> ranks;
};

struct SubmittedRun {
  std::string run_id;  // run-...
  std::string name;
};

class HttpApiClient {
 public:
  // Makes a client for `endpoint` (HOST:PORT of the head's HTTP API, and the token); does not contact the head.
  // InvalidArgument when the address is empty.
  static absl::StatusOr<std::unique_ptr<HttpApiClient>> Connect(const HeadEndpoint& endpoint);
  ~HttpApiClient();

  // Jobs.
  // Submits a job; returns its submission id.
  absl::StatusOr<std::string> SubmitJob(const JobSubmission& job);
  // One job's JobDetails.
  absl::StatusOr<nlohmann::json> GetJob(const std::string& id);
  // Every job's JobDetails, as a JSON list.
  absl::StatusOr<nlohmann::json> ListJobs();
  // Asks a job to stop; false when it had already ended.
  absl::StatusOr<bool> StopJob(const std::string& id);
  // Deletes an ended job; InvalidArgument (the head's 400) while it has not ended.
  absl::Status DeleteJob(const std::string& id);
  // A job's output from byte `offset` on (at most about a megabyte per call). With `wait_ms` > 0 (at most
  // 30,000) the head answers when there is output, when the job has ended, or after that long (then empty).
  absl::StatusOr<JobLogChunk> ReadJobLog(const std::string& id, int64_t offset, int64_t wait_ms = 0);
  // A job's whole output so far (GET /api/jobs/{id}/logs).
  absl::StatusOr<std::string> JobLogs(const std::string& id);

  // Gang runs.
  // Submits a run (POST /api/v0/runs with train::RunSpecToJson(spec)); returns its id and name.
  absl::StatusOr<SubmittedRun> SubmitRun(const train::RunSpec& spec);
  // One run, by id or name.
  absl::StatusOr<nlohmann::json> GetRun(const std::string& id_or_name);
  // Every run, as a JSON list.
  absl::StatusOr<nlohmann::json> ListRuns();
  // Actors of the head's directory (GET /api/v0/actors), newest first; `state` ("ALIVE", ...) and `job_id` filter
  // when not empty.
  absl::StatusOr<nlohmann::json> ListActors(const std::string& state = "", const std::string& job_id = "");
  // Tasks of the head's table (GET /api/v0/tasks), newest first; the filters apply when not empty; at most `limit`.
  absl::StatusOr<nlohmann::json> ListTasks(const std::string& state, const std::string& job_id,
                                           const std::string& name, int limit);
  // Counts by function and state (GET /api/v0/tasks/summary).
  absl::StatusOr<nlohmann::json> TaskSummary();
  // GET /api/v0/autoscaler: node types, launched slices, waiting groups' notes, failures ({"enabled": false} if off).
  absl::StatusOr<nlohmann::json> Autoscaler();
  // Services (POST/GET/DELETE /api/v0/services): deploy a spec (YAML or JSON text) -> {"name", "version",
  // "changed"}; one service's view; every service's; delete one.
  absl::StatusOr<nlohmann::json> DeployService(const std::string& spec_text);
  absl::StatusOr<nlohmann::json> GetService(const std::string& name);
  absl::StatusOr<nlohmann::json> ListServices();
  absl::Status DeleteService(const std::string& name);
  // POST /api/v0/services/load: the load an ingress apart from the head carries (serve/remote_routes.h).
  absl::Status ReportServiceLoad(const std::string& load_json);
  // Stops a run; false when it had already ended.
  absl::StatusOr<bool> StopRun(const std::string& id_or_name);
  // Rank `rank`'s output in attempt `attempt` (0: the current one) from byte `offset` on.
  absl::StatusOr<RunLogChunk> ReadRunLog(const std::string& id_or_name, int rank, int attempt, int64_t offset,
                                         int64_t wait_ms = 0);
  // Every rank's output of attempt `attempt` (0: the current one) in one request, rank r from offsets[r] (empty:
  // every rank from 0; otherwise one per rank).
  // With `wait_ms` > 0 the head answers when a rank that runs writes or all of them have ended, or after that long.
  absl::StatusOr<RunLogs> ReadRunLogs(const std::string& id_or_name, int attempt, const std::vector<int64_t>& offsets,
                                      int64_t wait_ms = 0);

  // Events (GET /api/v0/events; docs/rest.md). The head's epoch and newest revision now: read the objects after
  // this, then watch from it, and no change is missed.
  absl::StatusOr<EventCursor> EventsNow();
  // The events after *from that match `selector`, waiting up to `wait_ms` (at most 60,000) for one when there are
  // none yet (then empty); advances *from past what it read. OutOfRange as WatchEvents.
  absl::StatusOr<std::vector<nlohmann::json>> WaitEvents(EventCursor* from, const EventSelector& selector,
                                                        int64_t wait_ms);
  // Streams the events after *from that match `selector` to `on_event` as they happen, in order, on a connection
  // of its own, advancing *from past each event and each progress mark, until on_event returns false (then OK).
  // OutOfRange when the head has restarted since from->epoch or no longer keeps the events after it: read the
  // objects again, then watch from EventsNow(). Unavailable when the stream breaks (the head went away): watch
  // again from *from once it is back.
  absl::Status WatchEvents(EventCursor* from, const EventSelector& selector,
                           const std::function<bool(const nlohmann::json& event)>& on_event);

  // Packages (runtime_env working_dir and py_modules; Ray's routes). Whether the head holds package `name`.
  absl::StatusOr<bool> PackageExists(const std::string& name);
  // Uploads the archive `bytes` as package `name` (PUT /api/packages/gcs/<name>); true when stored, false when the
  // head had the same bytes already. ResourceExhausted above the head's size limit.
  absl::StatusOr<bool> PutPackage(const std::string& name, const std::string& bytes);

  std::string address() const;

 private:
  explicit HttpApiClient(const HeadEndpoint& endpoint);

  // The connection in use and its address.
  std::pair<std::shared_ptr<httplib::Client>, std::string> Current() const;
  // After a request to `tried` could not connect: true when the address file now names another head (then in use).
  bool FollowMovedHead(const std::string& tried);
  // Runs `call` on the current connection, and once more on a moved head's when it could not connect.
  absl::StatusOr<nlohmann::json> Send(const std::function<httplib::Result(httplib::Client&)>& call);

  // The JSON of a 2xx answer, else the mapped error (see the header comment).
  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  absl::StatusOr<nlohmann::json> Post(const std::string& path, const std::string& json_body);
  absl::StatusOr<nlohmann::json> Delete(const std::string& path);

  const std::string token_;
  const std::string address_file_;
  const std::string tls_ca_;  // "" = plain HTTP
  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<httplib::Client> client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::client
