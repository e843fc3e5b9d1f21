"""serve.status() from the head's services: each service serve.run deployed carries its application and deployment
names in its env, and its status and replicas map onto Ray's.

    service status       deployment status (trigger)
    RUNNING              HEALTHY (CONFIG_UPDATE_COMPLETED)
    DEPLOYING, UPDATING  UPDATING (CONFIG_UPDATE_STARTED); UPSCALING / DOWNSCALING (AUTOSCALING) when an
                         autoscaled service has READY replicas and wants more / fewer
    UNHEALTHY            UNHEALTHY (HEALTH_CHECK_FAILED)
    replicas that ended before any was READY, max_constructor_retry_count of them (default 20):
                         DEPLOY_FAILED (REPLICA_STARTUP_FAILED); serve.run then scales the service to no replica
                         and marks it (TORUS_SERVE_DEPLOY_FAILED in its env) so that it stops retrying, as Ray
                         stops retrying a constructor

    UPDATING with replicas PENDING for 30 s or more: the message says so in Ray's words (slow_scheduling_message)

    replica state        PENDING, STARTING -> STARTING; READY -> RUNNING; DRAINING, STOPPING -> STOPPING

An application is DEPLOY_FAILED when a deployment is, UNHEALTHY when one is, RUNNING when all are HEALTHY, else
DEPLOYING. Pure functions; thread-safe.
"""

import json
import re
import time

from torus.serve.schema import (ApplicationStatus, ApplicationStatusOverview, DeploymentStatus,
                                DeploymentStatusOverview, DeploymentStatusTrigger, ReplicaState, ServeStatus)

# Ray's: replicas waiting this long to be scheduled are named in the deployment's message (and serve.run warns).
SLOW_STARTUP_WARNING_S = 30
# Ray's default max_constructor_retry_count: failed starts before a deployment is DEPLOY_FAILED.
DEFAULT_CONSTRUCTOR_RETRIES = 20
_REPLICA_STATES = {"PENDING": ReplicaState.STARTING, "STARTING": ReplicaState.STARTING,
                   "READY": ReplicaState.RUNNING, "DRAINING": ReplicaState.STOPPING,
                   "STOPPING": ReplicaState.STOPPING}


def serve_env(service):
    return (service.get("spec") or {}).get("env") or {}


def is_serve_service(service):
    return "TORUS_SERVE_APP" in serve_env(service)


def failed_startups(service, ignore=()):
    """{run id: what ended it} of the replicas that ended without ever being READY, as the service's events tell
    (the head keeps its newest events only); runs in `ignore` left out."""
    events = service.get("events") or []
    ready = {m.group(1) for e in events for m in [re.search(r"replica (\S+) READY", e)] if m}
    out = {}
    for event in events:
        m = re.search(r"replica (\S+) ended: (.*)", event)
        if m and m.group(1) not in ready and m.group(1) not in ignore:
            reason = re.search(r"exited with code \d+: (.*?)(?:; replacing it)?$", m.group(2))
            out[m.group(1)] = reason.group(1) if reason else m.group(2)
    return out


def constructor_retries(service):
    return int(serve_env(service).get("TORUS_SERVE_CONSTRUCTOR_RETRIES") or DEFAULT_CONSTRUCTOR_RETRIES)


def startup_failure_message(failures):
    last = list(failures.values())[-1] if failures else ""
    return (f"The deployment failed to start {len(failures)} times in a row. This may be due to a problem with its "
            f"constructor or initial health check failing. See the replica logs (`torus serve status`) for "
            f"details. Error:\n{last}")


def deployment_overview(service, failures=None, now_s=None) -> DeploymentStatusOverview:
    states = {}
    for replica in service.get("replicas") or []:
        state = _REPLICA_STATES.get(replica.get("state"), ReplicaState.STARTING)
        states[state] = states.get(state, 0) + 1
    env = serve_env(service)
    if env.get("TORUS_SERVE_DEPLOY_FAILED"):
        return DeploymentStatusOverview(DeploymentStatus.DEPLOY_FAILED,
                                        DeploymentStatusTrigger.REPLICA_STARTUP_FAILED, states,
                                        env["TORUS_SERVE_DEPLOY_FAILED"])
    status = service.get("status")
    ready, target = service.get("ready_replicas", 0), service.get("target_replicas", 0)
    failures = failed_startups(service) if failures is None else failures
    autoscaled = "autoscaling" in (service.get("spec") or {})
    if status == "RUNNING":
        return DeploymentStatusOverview(DeploymentStatus.HEALTHY, DeploymentStatusTrigger.CONFIG_UPDATE_COMPLETED,
                                        states, "")
    if status == "UNHEALTHY":
        return DeploymentStatusOverview(DeploymentStatus.UNHEALTHY, DeploymentStatusTrigger.HEALTH_CHECK_FAILED,
                                        states, f"No replica of {target} is READY; see `torus serve status "
                                                f"{service.get('name')}`.")
    if ready == 0 and len(failures) >= constructor_retries(service):
        return DeploymentStatusOverview(DeploymentStatus.DEPLOY_FAILED,
                                        DeploymentStatusTrigger.REPLICA_STARTUP_FAILED, states,
                                        startup_failure_message(failures))
    if autoscaled and ready > 0 and status == "DEPLOYING":
        return DeploymentStatusOverview(DeploymentStatus.UPSCALING, DeploymentStatusTrigger.AUTOSCALING, states,
                                        f"Upscaling from {ready} to {target} replicas.")
    if autoscaled and ready > target:
        return DeploymentStatusOverview(DeploymentStatus.DOWNSCALING, DeploymentStatusTrigger.AUTOSCALING, states,
                                        f"Downscaling from {ready} to {target} replicas.")
    return DeploymentStatusOverview(DeploymentStatus.UPDATING, DeploymentStatusTrigger.CONFIG_UPDATE_STARTED,
                                    states, slow_scheduling_message(service, now_s) or
                                    f"Deployment is updating: {ready} of {target} replicas READY.")


def slow_scheduling_message(service, now_s=None):
    """Ray's words for replicas that have waited for resources longer than SLOW_STARTUP_WARNING_S; "" if none."""
    now_ms = (time.time() if now_s is None else now_s) * 1000
    waiting = [r for r in service.get("replicas") or [] if r.get("state") == "PENDING" and r.get("created_ms")
               and now_ms - r["created_ms"] >= SLOW_STARTUP_WARNING_S * 1000]
    if not waiting:
        return ""
    env = serve_env(service)
    replica = (service.get("spec") or {}).get("replica") or {}
    return (f"Deployment '{env.get('TORUS_SERVE_DEPLOYMENT')}' in application '{env.get('TORUS_SERVE_APP')}' has "
            f"{len(waiting)} replicas that have taken more than {SLOW_STARTUP_WARNING_S}s to be scheduled. This may "
            f"be due to waiting for the cluster to auto-scale or for other replicas to release their resources. "
            f"Resources required for each replica: {json.dumps(replica, sort_keys=True)}. Use `torus status` for "
            f"more details.")


def application_overview(services, failures=None) -> ApplicationStatusOverview:
    """`failures`: {service name: failed startups} when the caller keeps count (serve.run does)."""
    failures = failures or {}
    deployments = {serve_env(s)["TORUS_SERVE_DEPLOYMENT"]: deployment_overview(s, failures.get(s["name"]))
                   for s in services}
    statuses = [d.status for d in deployments.values()]
    message = ""
    if DeploymentStatus.DEPLOY_FAILED in statuses:
        status = ApplicationStatus.DEPLOY_FAILED
        failed = [name for name, d in deployments.items() if d.status == DeploymentStatus.DEPLOY_FAILED]
        message = f"Failed to update the deployments {failed}.\n" + "\n".join(
            f"{name}: {deployments[name].message}" for name in failed)
    elif DeploymentStatus.UNHEALTHY in statuses:
        status = ApplicationStatus.UNHEALTHY
        message = "The application is unhealthy: " + ", ".join(
            name for name, d in deployments.items() if d.status == DeploymentStatus.UNHEALTHY)
    elif all(s == DeploymentStatus.HEALTHY for s in statuses):
        status = ApplicationStatus.RUNNING
    else:
        status = ApplicationStatus.DEPLOYING
    last = max((s.get("updated_ms") or s.get("created_ms") or 0) for s in services) / 1000.0
    return ApplicationStatusOverview(status=status, message=message, last_deployed_time_s=last,
                                     deployments=deployments)


def serve_status(services, ingress_up) -> ServeStatus:
    by_app = {}
    for service in services:
        if is_serve_service(service):
            by_app.setdefault(serve_env(service)["TORUS_SERVE_APP"], []).append(service)
    from torus.serve.schema import ProxyStatus
    return ServeStatus(proxies={"ingress": ProxyStatus.HEALTHY} if ingress_up else {},
                       applications={app: application_overview(s) for app, s in sorted(by_app.items())})
