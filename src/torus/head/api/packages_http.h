// Packages over HTTP: Ray's job clients' routes for runtime_env uploads, and a listing.
//
//   GET  /api/packages/{protocol}/{name}   200 {"name", "sha256", "size"} when the head holds it, 404 otherwise
//   PUT  /api/packages/{protocol}/{name}   body: the zip archive -> 200 {"name", "sha256", "size", "stored": bool}
//                                          (false: the same bytes were already stored); 400 for a bad name or
//                                          archive, 409 for a name stored with other bytes, 413 above the size limit,
//                                          503 while 4 other uploads are being received
//   GET  /api/v0/packages                  [{"name", "uri", "sha256", "size", "stored_time_ms", "users",
//                                          "unused_since_ms"}]
// `protocol` is "gcs", the only one Ray's clients upload with; a job then names the package "gcs://{name}".
//
// Thread-safety: handlers call the thread-safe PackageStore.
#pragma once

#include <httplib.h>

#include "torus/head/packages/package_store.h"

namespace torus::head {

void RegisterPackageRoutes(httplib::Server& server, PackageStore* packages, const StateStore* store);

}  // namespace torus::head
