// Actors and tasks over HTTP (the head's JSON API), from the actor directory and the task table:
//
//   GET /api/v0/actors[?state=ALIVE][&job_id=J][&name=N][&namespace=S][&limit=L][&offset=O]
//                              [actor], newest first; X-Total-Count
//   GET /api/v0/actors/{id}    actor: actor_id, name, namespace, class_name, state, job_id, owner_address, node_id,
//                              pid, address, resources, restarts, max_restarts, max_task_retries, death_cause, times, methods
//   GET /api/v0/tasks[?state=RUNNING][&job_id=J][&name=F][&limit=N]
//                              [task], newest first (limit default 100, at most 10000); X-Total-Count: the kept
//                              tasks that match
//   GET /api/v0/tasks/summary  [{"name", "state", "count"}]: every task reported since the head started
//
// Thread-safety: handlers call the thread-safe ActorDirectory and TaskTable.
#pragma once

#include <httplib.h>

#include "torus/head/actors/actor_directory.h"
#include "torus/head/tasks/task_table.h"

namespace torus::head {

void RegisterActorRoutes(httplib::Server& server, ActorDirectory* actors);
void RegisterTaskRoutes(httplib::Server& server, const TaskTable* tasks);

}  // namespace torus::head
