"""The deploy of a built application: one package and one service per deployment, then the application's
services it no longer has deleted. Refuses, before deploying anything, a route prefix another application's
ingress has (Ray's RayServeException). Not thread-safe (one serve.run at a time per process).
"""

import os
import pickle
import tempfile

from torus.serve._private import pickling
from torus.serve._private import service_spec as _spec
from torus.serve._private import status as _status
from torus.serve._private.client import RouteTakenError
from torus.serve.exceptions import RayServeException

from torus.serve._replica import PACKAGE_DIR, PAYLOAD


def deploy_application(client, built):
    """Deploys the application's services; returns {service name: replica runs that had ended when it was
    deployed}, which serve.run leaves out when it counts failed starts (the head keeps a service's events across
    a delete)."""
    existing = client.head.list()
    baseline = {}
    _check_route_prefix(existing, built)
    cluster = _cluster(client)
    shapes = _tpu_shapes(built)
    python_path = _python_path()
    planned = {_spec_name(built, d) for d in built.deployments}
    # Services of the application that it no longer has go first: one of them may hold the route prefix.
    for service in existing:
        if _status.serve_env(service).get("TORUS_SERVE_APP") == built.name and service["name"] not in planned:
            client.head.delete(service["name"])
    for deployment in built.deployments:
        is_ingress = deployment.name == built.ingress_deployment_name
        package = _upload_payload(client, deployment, built, is_ingress, cluster)
        working_dir = _working_dir(client, deployment)
        spec = _spec.service_spec(deployment, _spec.SpecInput(
            app_name=built.name, app_route_prefix=built.route_prefix, is_ingress=is_ingress, package_uri=package,
            python_path=python_path, working_dir=working_dir, ray_alias=os.environ.get("TORUS_RAY_ALIAS") == "1",
            tpu_shapes=tuple(shapes)))
        try:
            client.head.deploy(spec)
            deployed = client.head.get(spec["name"]) or {}
            baseline[spec["name"]] = set(_status.failed_startups(deployed))
        except RouteTakenError as e:
            raise RayServeException(f"Prefix {spec['route_prefix']} is being used by another service ({e}). Failed "
                                    f"to deploy application \"{built.name}\".") from None
        except ValueError as e:
            raise ValueError(f"deployment {deployment.name!r} of application {built.name!r}: {e}") from None
    client.forget_app(built.name)
    return baseline


def mark_failed(client, service, message):
    """Scales a deployment that failed to start to no replica, its message kept in its spec (serve.status())."""
    spec = dict(service["spec"])
    spec.pop("autoscaling", None)
    spec["num_replicas"] = 0
    spec["env"] = dict(spec.get("env") or {}, TORUS_SERVE_DEPLOY_FAILED=message)
    client.head.deploy(spec)


def _spec_name(built, deployment):
    from torus.serve._private import naming
    return naming.service_name(built.name, deployment.name)


def _check_route_prefix(existing, built):
    if built.route_prefix is None:
        return
    for service in existing:
        env = _status.serve_env(service)
        app = env.get("TORUS_SERVE_APP")
        if app is not None and app != built.name and env.get("TORUS_SERVE_INGRESS") == "1" \
                and env.get("TORUS_SERVE_ROUTE_PREFIX") == built.route_prefix:
            raise RayServeException(f"Prefix {built.route_prefix} is being used by application \"{app}\". Failed "
                                    f"to deploy application \"{built.name}\".")


def _cluster(client):
    from torus._private import state as _st
    state = _st.current()
    head = state.head_address if state is not None else os.environ.get("TORUS_ADDRESS", "")
    return {"dashboard": client.head.http_address, "token": client.head.token, "head": head}


def _upload_payload(client, deployment, built, is_ingress, cluster):
    config = deployment._deployment_config
    world_size = (config.autoscaling_config.initial_replicas or config.autoscaling_config.min_replicas
                  if config.autoscaling_config is not None else config.num_replicas)
    try:
        blob = pickling.dumps(deployment)
    except Exception as e:
        raise TypeError(f"Could not serialize the deployment {deployment.func_or_class!r}: {e}") from e
    header = {"cluster": cluster, "app_name": built.name, "is_ingress": is_ingress, "world_size": world_size,
              "deployment": blob}
    with tempfile.TemporaryDirectory(prefix="torus-serve-") as tmp:
        package = os.path.join(tmp, PACKAGE_DIR)
        os.mkdir(package)
        with open(os.path.join(package, PAYLOAD), "wb") as f:
            pickle.dump(header, f, protocol=5)
        from torus._private import state as _st
        return _st.import_core().upload_py_module(client.head.http_address, client.head.token, package)


def _working_dir(client, deployment):
    env = (deployment.ray_actor_options or {}).get("runtime_env") or {}
    working_dir = env.get("working_dir")
    if not working_dir:
        return ""
    if "://" in working_dir:
        return working_dir
    if not os.path.isdir(working_dir):
        raise ValueError(f"ray_actor_options['runtime_env']['working_dir']: {working_dir!r} is not a local "
                         f"directory; give a directory to upload, or a package URI (gcs://<name>.zip)")
    return client.head.upload_package(working_dir, include_parent_dir=False)


def _tpu_shapes(built):
    wants_tpu = any(_asks_tpu(d) for d in built.deployments)
    if not wants_tpu:
        return []
    from torus._private import worker as _worker
    return _spec.tpu_shapes_of(_worker.nodes())


def _asks_tpu(deployment):
    rc = deployment._replica_config
    if rc.replica_gang is not None:
        return False
    if (rc.ray_actor_options.get("resources") or {}).get("TPU"):
        return True
    return any(b.get("TPU") for b in rc.placement_group_bundles or [])


def _python_path():
    from torus.train._trainer import _worker_pythonpath
    return _worker_pythonpath()

