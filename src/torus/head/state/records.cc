#include "torus/head/state/records.h"

namespace torus::head {
namespace {

struct NameOf {
  std::string_view operator()(const HeadStarted&) const { return "HeadStarted"; }
  std::string_view operator()(const NodeRegistered&) const { return "NodeRegistered"; }
  std::string_view operator()(const NodeDied&) const { return "NodeDied"; }
  std::string_view operator()(const NodeRemoved&) const { return "NodeRemoved"; }
  std::string_view operator()(const NodeRevoked&) const { return "NodeRevoked"; }
  std::string_view operator()(const ServiceDeployed&) const { return "ServiceDeployed"; }
  std::string_view operator()(const ServiceDeleted&) const { return "ServiceDeleted"; }
  std::string_view operator()(const GroupSubmitted&) const { return "GroupSubmitted"; }
  std::string_view operator()(const GroupPlaced&) const { return "GroupPlaced"; }
  std::string_view operator()(const GroupWaiting&) const { return "GroupWaiting"; }
  std::string_view operator()(const GroupBundlesLost&) const { return "GroupBundlesLost"; }
  std::string_view operator()(const GroupEnded&) const { return "GroupEnded"; }
  std::string_view operator()(const WorkerStarting&) const { return "WorkerStarting"; }
  std::string_view operator()(const WorkerStarted&) const { return "WorkerStarted"; }
  std::string_view operator()(const WorkerExited&) const { return "WorkerExited"; }
  std::string_view operator()(const JobSubmitted&) const { return "JobSubmitted"; }
  std::string_view operator()(const JobUpdated&) const { return "JobUpdated"; }
  std::string_view operator()(const JobStopRequested&) const { return "JobStopRequested"; }
  std::string_view operator()(const JobDeleted&) const { return "JobDeleted"; }
  std::string_view operator()(const PackageStored&) const { return "PackageStored"; }
  std::string_view operator()(const PackageRemoved&) const { return "PackageRemoved"; }
  std::string_view operator()(const RunSubmitted&) const { return "RunSubmitted"; }
  std::string_view operator()(const AttemptStarted&) const { return "AttemptStarted"; }
  std::string_view operator()(const AttemptEnded&) const { return "AttemptEnded"; }
  std::string_view operator()(const AttemptExplained&) const { return "AttemptExplained"; }
  std::string_view operator()(const RunFinished&) const { return "RunFinished"; }
  std::string_view operator()(const RunStopRequested&) const { return "RunStopRequested"; }
  std::string_view operator()(const RunReported&) const { return "RunReported"; }
  std::string_view operator()(const CheckpointCommitted&) const { return "CheckpointCommitted"; }
  std::string_view operator()(const ActorRegistered&) const { return "ActorRegistered"; }
  std::string_view operator()(const ActorUpdated&) const { return "ActorUpdated"; }
};

}  // namespace

std::string_view RecordName(const Record& record) { return std::visit(NameOf{}, record); }

}  // namespace torus::head
