// The Ray Jobs REST API on the head's HTTP server (reference/semantics.md §9), so that Ray job clients and
// KubeRay-style controllers can submit to torus:
//
//   GET  /api/version               {"version": "4", "ray_version", "ray_commit", "session_name"}
//   POST /api/jobs/                 {"job_id", "submission_id"}
//   GET  /api/jobs/                 [JobDetails]
//   GET  /api/jobs/{id}             JobDetails, or 404 "Job {id} does not exist"
//   GET  /api/jobs/{id}/logs        {"logs": "..."}
//   GET  /api/v0/jobs/{id}/logs?offset=O[&wait_ms=W]
//                                   {"data", "next_offset", "finished", "status"}: output from byte O; with W (at
//                                   most 60000) it waits that long for output, or for the job to end, when there
//                                   is none yet
//   GET  /api/jobs/{id}/logs/tail   a WebSocket of the job's output (log_tail_http.h)
//   POST /api/jobs/{id}/stop        {"stopped": bool}
//   DELETE /api/jobs/{id}           {"deleted": true}; 400 while not terminal, in Ray's words ("Attempted to delete
//                                   job 'ID', but it is in a non-terminal state RUNNING.")
//
// Bad requests (bad JSON, unknown fields, wrong types) get 400 with a text body naming the field; 404 says
// "Job {id} does not exist", as Ray's job server does. The runtime_env keys Ray's client adds about itself
// (_ray_commit, _inject_current_ray) are kept in the job's runtime_env and otherwise ignored.
//
// Thread-safety: handlers run on the HTTP server's threads and call the thread-safe JobService.
#pragma once

#include <httplib.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "torus/head/api/event_log.h"
#include "torus/head/workloads/job_service.h"

namespace torus::head {

struct JobsHttpOptions {
  std::string ray_version = "2.40.0";  // what Ray job clients are told; they refuse versions below 2.8
  std::string session_name;
};

// Job `id`'s output from byte `offset`: answers when there is some, when the job has ended and all of it was read
// (`finished`, its end recorded), when the head stops, or at `deadline` (empty). NotFound for an unknown job.
absl::StatusOr<LogChunk> ReadJobLogWaiting(JobService& jobs, const EventLog& events, const std::string& id,
                                           int64_t offset, absl::Time deadline);

// `events` lets a log read wait for a job that has not started yet.
void RegisterJobRoutes(httplib::Server& server, JobService* jobs, const EventLog* events, JobsHttpOptions options);

// Parses a POST /api/jobs/ body. InvalidArgument names the field and the expected type.
absl::StatusOr<JobRequest> ParseJobSubmission(const std::string& body);

}  // namespace torus::head
