"""A Serve replica's process: `python -m torus.serve._replica`, the entrypoint of every service serve.run deploys.

Every rank of the replica's gang runs it. Rank 0 loads the deployment serve.run packed (the package on its
PYTHONPATH), sets its replica context, constructs it and serves HTTP on $TORUS_SERVE_PORT until SIGTERM, letting
requests in flight finish for up to graceful_shutdown_timeout_s (serve/_private/replica_server.py). Ranks > 0
construct nothing: they hold their share of the gang's devices and wait until the replica stops.

A constructor that raises ends the process with code 1 and its traceback in the replica's log; the service then
replaces the replica, and serve.run reports the error.
"""

import asyncio
import os
import pickle
import signal
import sys
import threading
import traceback

PACKAGE_DIR = "torus_serve_replica"
PAYLOAD = "payload.pkl"


def _load_payload():
    for entry in sys.path:
        candidate = os.path.join(entry or ".", PACKAGE_DIR, PAYLOAD)
        if os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                return f.read()
    raise RuntimeError(f"the deployment's package ({PACKAGE_DIR}/{PAYLOAD}) is on no PYTHONPATH entry: {sys.path}")


def _hold_until_stopped():
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _cluster_environment(cluster):
    """What the replica needs to reach the head (handle calls, torus.init() in user code)."""
    os.environ["TORUS_SERVE_REPLICA"] = "1"
    os.environ["TORUS_DASHBOARD_ADDRESS"] = cluster["dashboard"]
    os.environ["TORUS_TOKEN"] = cluster["token"]
    os.environ.setdefault("TORUS_ADDRESS", cluster["head"])
    if os.environ.get("TORUS_RAY_ALIAS") == "1":
        from torus._private import ray_alias
        ray_alias.install()


def main():
    rank = int(os.environ.get("TORUS_RANK") or os.environ.get("RANK") or 0)
    blob = _load_payload()
    header = pickle.loads(blob)  # {"cluster": ..., "deployment": bytes}: the deployment unpickles after the env
    _cluster_environment(header["cluster"])
    if rank > 0:
        _hold_until_stopped()
        return 0
    try:
        import uvicorn
    except ImportError as e:
        raise ImportError(f"a Serve replica needs uvicorn (and starlette) in its Python ({sys.executable}); install "
                          f"them (pip install 'uvicorn[standard]' starlette, or Debian's python3-uvicorn "
                          f"python3-starlette): {e}") from e
    import cloudpickle

    from torus.serve import context
    from torus.serve._private.replica_server import ReplicaServer
    from torus.serve._private.user_callable import UserCallable
    from torus.serve.handle import DeploymentID

    deployment = cloudpickle.loads(header["deployment"])
    config = deployment._deployment_config
    app_name = header["app_name"]
    user = UserCallable(deployment, app_name, config.max_ongoing_requests)
    replica_id = context.ReplicaID(os.environ.get("TORUS_RUN_ID") or str(os.getpid()),
                                   DeploymentID(deployment.name, app_name))

    async def construct():
        context._set_internal_replica_context(context.ReplicaContext(
            replica_id=replica_id, servable_object=None, _deployment_config=config,
            world_size=header.get("world_size", 1)))
        await user.construct()
        context._get_internal_replica_context().servable_object = user.instance

    server = ReplicaServer(user, app_name=app_name, deployment_name=deployment.name,
                           is_ingress=header["is_ingress"], token=header["cluster"]["token"],
                           max_ongoing_requests=config.max_ongoing_requests,
                           health_check_timeout_s=config.health_check_timeout_s, construct=construct)
    port = int(os.environ["TORUS_SERVE_PORT"])
    uv_config = uvicorn.Config(server, host="0.0.0.0", port=port, lifespan="on", log_level="warning",
                               access_log=False, timeout_graceful_shutdown=config.graceful_shutdown_timeout_s)
    uv_server = uvicorn.Server(uv_config)

    async def run():
        # Constructed on the loop that serves it (its async resources belong to that loop), before the port opens.
        try:
            await server.startup()
        except Exception:  # noqa: BLE001 - the constructor's error ends the replica; its last line says what
            traceback.print_exc()
            return 1
        await uv_server.serve()
        return 0

    return asyncio.run(run())

if __name__ == "__main__":
    sys.exit(main())
