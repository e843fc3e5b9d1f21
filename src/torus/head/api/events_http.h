// The head's events over HTTP (event_log.h): what changed, in commit order, for clients that wait on it.
//
//   GET /api/v0/events?[since=R][&epoch=E][&kind=job,run][&id=ID,...][&wait_ms=N]
//       {"epoch", "revision", "events": [...]}: the kept events after revision R (default: all kept) that match; with
//       wait_ms (at most 60000) it answers as soon as one matches, or empty at the end of the wait.
//   GET /api/v0/events/revision
//       {"epoch", "revision"}: the newest revision now; read objects after this and watch from it to miss nothing.
//   GET /api/v0/events?watch=1[&since=R][&epoch=E][&kind=...][&id=...]
//       A stream of server-sent events (text/event-stream), one per change, from revision R (default: from now):
//         event: hello     data: {"epoch", "revision"}          first
//         id: REV          event: job|run|group|node|worker     data: the event
//         event: progress  data: {"revision"}                   every 10 s without a matching event
//         event: error     data: {"error", "code", "epoch", "revision"}, then the stream ends; code is the HTTP
//                          status the same failure gets as an answer (410, 400; 503 when the head stops)
//
// A resume names the epoch it read (`epoch`). When the head has restarted since (another epoch), or has dropped
// the events after R, the answer is 410 with {"error", "epoch", "revision"}: read the objects again, then watch
// from that epoch and revision. Bad parameters get 400 naming the parameter. At most 32 streams at once (503).
//
// Thread-safety: handlers run on the HTTP server's threads; a stream holds one of them while it is open.
#pragma once

#include <httplib.h>

#include "torus/head/api/event_log.h"

namespace torus::head {

void RegisterEventRoutes(httplib::Server& server, const EventLog* events);

}  // namespace torus::head
