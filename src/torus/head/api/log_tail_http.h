// Ray's job log tail: GET /api/jobs/{id}/logs/tail, a WebSocket (RFC 6455) on which the head sends the job's
// output as text messages while it is written (from its start), and a close frame (1000) once the job has ended and
// all of it was sent — what Ray's JobSubmissionClient.tail_job_logs reads.
//
//   404 "Job {id} does not exist"    unknown job (before any upgrade, as Ray answers)
//   400 naming the header            not a WebSocket handshake (Upgrade, Connection, Sec-WebSocket-Version 13, Key)
//   101 Switching Protocols          then text frames (UTF-8: bytes that are not become U+FFFD), a ping every 15 s
//                                    while the job is silent (a client gone is noticed at the next send), and
//                                    close 1000 when the job ended (1011 if its log cannot be read)
//
// The head only sends: what the client sends (its close reply, pongs) is not read; the connection ends after the
// close frame.
//
// Thread-safety: the handler runs on the HTTP server's threads and calls the thread-safe JobService and EventLog.
#pragma once

#include <httplib.h>

#include "torus/head/api/event_log.h"
#include "torus/head/workloads/job_service.h"

namespace torus::head {

void RegisterLogTailRoute(httplib::Server& server, JobService* jobs, const EventLog* events);

}  // namespace torus::head
