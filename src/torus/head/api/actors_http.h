// Actors over HTTP (the head's JSON API), from the actor directory:
//
//   GET /api/v0/actors[?state=ALIVE][&job_id=J][&name=N][&namespace=S][&limit=L][&offset=O]
//                              [actor], newest first; X-Total-Count
//   GET /api/v0/actors/{id}    actor: actor_id, name, namespace, class_name, state, job_id, owner_address, node_id,
//                              pid, address, resources, restarts, max_restarts, death_cause, times, methods
//
// Thread-safety: handlers call the thread-safe ActorDirectory.
#pragma once

#include <httplib.h>

#include "torus/head/actors/actor_directory.h"

namespace torus::head {

void RegisterActorRoutes(httplib::Server& server, ActorDirectory* actors);

}  // namespace torus::head
