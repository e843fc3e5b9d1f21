"""serve.status() from the head's service records (torus.serve._private.status): Ray's statuses, triggers and
messages, among them the one for replicas that wait to be scheduled."""

from torus.serve._private import status
from torus.serve.schema import ApplicationStatus, DeploymentStatus, DeploymentStatusTrigger, ReplicaState


def service(state="DEPLOYING", replicas=(), ready=0, target=1):
    return {"name": "shop-store-abc123", "status": state, "ready_replicas": ready, "target_replicas": target,
            "created_ms": 1_000, "updated_ms": 2_000, "events": [], "replicas": list(replicas),
            "spec": {"env": {"TORUS_SERVE_APP": "shop", "TORUS_SERVE_DEPLOYMENT": "Store"},
                     "replica": {"accelerator_type": "TPU-V6E", "topology": "4x4"}}}


def replica(state, created_ms):
    return {"state": state, "created_ms": created_ms, "message": "waiting for resources"}


def test_running_service_is_a_healthy_deployment_and_a_running_application():
    overview = status.application_overview([service("RUNNING", [replica("READY", 1_000)], ready=1)])
    assert overview.status == ApplicationStatus.RUNNING and overview.message == ""
    store = overview.deployments["Store"]
    assert (store.status, store.status_trigger, store.replica_states) == (
        DeploymentStatus.HEALTHY, DeploymentStatusTrigger.CONFIG_UPDATE_COMPLETED, {ReplicaState.RUNNING: 1})
    assert overview.last_deployed_time_s == 2.0


def test_a_replica_waiting_30_s_for_resources_is_named_in_rays_words():
    waiting = service(replicas=[replica("PENDING", 10_000)])
    assert status.deployment_overview(waiting, now_s=39.999).message == \
        "Deployment is updating: 0 of 1 replicas READY."
    overview = status.deployment_overview(waiting, now_s=40.0)
    assert overview.status == DeploymentStatus.UPDATING
    assert overview.message == (
        "Deployment 'Store' in application 'shop' has 1 replicas that have taken more than 30s to be scheduled. "
        "This may be due to waiting for the cluster to auto-scale or for other replicas to release their "
        "resources. Resources required for each replica: {\"accelerator_type\": \"TPU-V6E\", \"topology\": "
        "\"4x4\"}. Use `torus status` for more details.")
    # A replica that is starting (placed) is not waiting to be scheduled.
    assert status.slow_scheduling_message(service(replicas=[replica("STARTING", 10_000)]), now_s=100) == ""


def test_failed_startups_reach_deploy_failed_after_the_retry_count():
    events = [f"replica run-{i} ended: exited with code 1: RuntimeError: no model; replacing it" for i in range(3)]
    broken = dict(service(), events=events)
    broken["spec"]["env"]["TORUS_SERVE_CONSTRUCTOR_RETRIES"] = "3"
    overview = status.application_overview([broken])
    assert overview.status == ApplicationStatus.DEPLOY_FAILED
    assert overview.deployments["Store"].status_trigger == DeploymentStatusTrigger.REPLICA_STARTUP_FAILED
    assert overview.message.endswith("Error:\nRuntimeError: no model")
