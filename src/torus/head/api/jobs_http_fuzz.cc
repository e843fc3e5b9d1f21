// libFuzzer target for the Ray Jobs submission body (POST /api/jobs/, docs/fuzzing.md): the whole input is the body.
// ParseJobSubmission may refuse it, with InvalidArgument; it must never crash, and neither may the check the head
// makes next (ValidateJobRequest). What parses round-trips through the head's own printers: the job's details as
// GET /api/jobs/{id} shows them (JobDetailsJson: entrypoint, submission_id, metadata, runtime_env,
// entrypoint_label_selector) with its resources as ResourceSet::ToJson prints them (entrypoint_resources),
// submitted again, parse to the same request.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nlohmann/json.hpp"
#include "torus/head/api/jobs_http.h"
#include "torus/head/api/views.h"
#include "torus/head/placement/group_ops.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/workloads/goodput.h"
#include "torus/head/workloads/job_machine.h"
#include "torus/head/workloads/job_service.h"
#include "torus/head/workloads/steps.h"

namespace {

namespace head = torus::head;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckRoundTrip(const head::JobRequest& request) {
  head::JobView view;
  view.job.id = head::JobId(request.submission_id.empty() ? "raysubmit_fuzz" : request.submission_id);
  view.job.request = request;
  const nlohmann::json details = head::JobDetailsJson(view);
  nlohmann::json body = nlohmann::json::object();
  for (const char* key : {"entrypoint", "submission_id", "metadata", "runtime_env", "entrypoint_label_selector"}) {
    body[key] = details.at(key);
  }
  body["entrypoint_resources"] = nlohmann::json::parse(request.resources.ToJson());

  absl::StatusOr<head::JobRequest> again = head::ParseJobSubmission(body.dump());
  Require(again.ok());
  head::JobRequest expected = request;
  expected.submission_id = view.job.id.str();
  Require(*again == expected);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<head::JobRequest> request = head::ParseJobSubmission(body);
  if (!request.ok()) {
    Require(request.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Require(!request->entrypoint.empty());
  const absl::Status valid = head::ValidateJobRequest(*request);
  Require(valid.ok() || valid.code() == absl::StatusCode::kInvalidArgument);
  CheckRoundTrip(*request);
  return 0;
}

// Stand-ins for the functions of the placement and workload libraries that the compiled-in files refer to (from the
// routes, the job service's methods and the run view), since clang 14 cannot build those libraries (see
// CMakeLists.txt). Weak, so that the real ones win wherever they are linked; the fuzzer never calls them.
namespace torus::head {

__attribute__((weak)) absl::StatusOr<GroupId> SubmitBundleGroup(Txn&, IdGenerator&, sched::BundleRequest,
                                                                const NewGroup&) {
  std::abort();
}
__attribute__((weak)) void PlacementScheduler::Release(std::vector<HeldBundle>) { std::abort(); }
__attribute__((weak)) JobStep ApplyJobStep(Txn&, const JobId&, int64_t, std::vector<HeldBundle>&) { std::abort(); }
__attribute__((weak)) std::string PendingMessage(const ClusterState&, const Job&) { std::abort(); }
__attribute__((weak)) Goodput RunGoodput(const Run&, int64_t) { std::abort(); }

}  // namespace torus::head
