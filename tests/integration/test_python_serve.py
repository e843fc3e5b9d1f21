"""ray.serve on torus (`from ray import serve` through python/as_ray): Ray Serve programs run against a real
`torus start --head` cluster, each deployment a torus service behind the head's ingress.

The examples/serve/ray_serve_*.py programs run as they are (HTTP through the ingress, handles, composition,
FastAPI routes, streaming); drivers written here check what they do not: a replica's exception reaching the caller
with its type and message, a constructor that fails, serve.status(), serve.delete and serve.shutdown, route
prefix conflicts, a replica gang of placement group bundles. Bad options get Ray's exact messages.

Drivers run with the development venv's Python (Ray Serve's dependencies: starlette, uvicorn, fastapi), so their
replicas do too.
"""

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

from conftest import BIN_DIR, REPO, Torus

VENV_PYTHON = REPO / ".venv" / "bin" / "python"
EXAMPLES = REPO / "examples" / "serve"


def _venv_problem():
    if not VENV_PYTHON.exists():
        return f"{VENV_PYTHON} is missing; scripts/setup.sh makes the development venv"
    probe = subprocess.run([str(VENV_PYTHON), "-c", "import starlette, uvicorn, fastapi"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return (f"the development venv lacks Ray Serve's dependencies (pip install 'ray[serve]' there): "
                f"{probe.stderr.strip().splitlines()[-1]}")
    return None


# The head's host for CPU replicas, and one simulated v5e host (a 2x4 slice of 8 chips) for TPU replicas.
CLUSTER_SPEC = """
head: {num_cpus: 64, memory: 16Gi}
node_groups:
  - name: v5e
    tpu: {pod_type: v5litepod-8, topology: 2x4}
    num_cpus: 8
    memory: 8Gi
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    problem = _venv_problem()
    if problem:
        pytest.fail(problem)
    root = tmp_path_factory.mktemp("serve")
    spec = root / "cluster.yaml"
    spec.write_text(CLUSTER_SPEC)
    t = Torus(root / "torus")
    try:
        t.up(spec=spec)
        yield t
    finally:
        t.cleanup()


def driver_env(t):
    env = dict(t.env)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python" / "as_ray"), str(REPO / "python"),
                                         str(BIN_DIR.parent / "python")] + inherited)
    return env


def ingress_url(t):
    return "http://" + (t.session / "serve_address").read_text().strip()


def run_program(t, cwd, *argv, timeout=180):
    """Runs a driver with the venv's Python; returns the JSON of its last line of output."""
    proc = subprocess.run([str(VENV_PYTHON), *map(str, argv)], env=driver_env(t), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, f"{argv[0]} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_example(t, tmp_path, name):
    return run_program(t, tmp_path, EXAMPLES / name, "--url", ingress_url(t))


def run_driver(t, tmp_path, source, timeout=180):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    return run_program(t, tmp_path, script, timeout=timeout)


def api(t, path, method="GET"):
    address = (t.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}{path}", method=method,
                                     headers={"Authorization": f"Bearer {t.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def services_of(t, app):
    return {s["spec"]["env"]["TORUS_SERVE_DEPLOYMENT"]: s for s in api(t, "/api/v0/services")
            if s["spec"].get("env", {}).get("TORUS_SERVE_APP") == app}


def http_get(t, path):
    with urllib.request.urlopen(ingress_url(t) + path, timeout=30) as response:
        return response.status, response.headers.get("Content-Type"), response.read()


def test_hello_world_function_deployment_serves_http_through_the_ingress(cluster, tmp_path):
    assert run_example(cluster, tmp_path, "ray_serve_hello.py") == {"http": "Hello serve!"}
    assert http_get(cluster, "/?name=torus") == (200, "text/plain; charset=utf-8", b"Hello torus!")
    services = services_of(cluster, "default")
    assert list(services) == ["hello"]
    hello = services["hello"]
    assert hello["route_prefix"] == "/" and hello["status"] == "RUNNING"
    assert hello["spec"]["env"]["TORUS_SERVE_INGRESS"] == "1"
    assert hello["spec"]["entrypoint"][1:] == ["-m", "torus.serve._replica"]
    replica = hello["spec"]["replica"]
    assert (replica["num_workers"], replica["resources_per_worker"], replica["placement_strategy"]) == \
        (1, {"CPU": 1}, "PACK")


def test_a_class_with_two_replicas_serves_from_both_with_its_user_config(cluster, tmp_path):
    out = run_example(cluster, tmp_path, "ray_serve_class.py")
    assert out["answers"] == [{"label": "cat", "score": 0.9}, {"label": "other", "score": 0.1}]
    assert out["described"] == {"label": "cat", "threshold": 0.5}
    assert len(out["pids"]) == 2, out  # twenty handle calls and two HTTP requests reached both replicas
    assert out["status"] == "RUNNING" and out["replicas"] == {"RUNNING": 2}
    service = services_of(cluster, "classifier")["Classifier"]
    assert service["target_replicas"] == 2 and service["ready_replicas"] == 2
    assert service["route_prefix"] == "/classify"


def test_composition_chains_deployments_through_handles_and_resolves_responses(cluster, tmp_path):
    out = run_example(cluster, tmp_path, "ray_serve_composition.py")
    assert out == {"handle": 21, "chained": 36, "http": {"input": 7, "output": 27}}
    services = services_of(cluster, "composition")
    assert sorted(services) == ["Adder", "Multiplier", "Pipeline"]
    # Only the ingress deployment takes the application's prefix; the others get internal ones.
    assert services["Pipeline"]["route_prefix"] == "/compose"
    assert services["Adder"]["route_prefix"] == "/-/serve/" + services["Adder"]["name"]
    status, _, body = _get_status(cluster, services["Adder"]["route_prefix"] + "/anything")
    assert status == 404 and b"is not its ingress" in body


def _get_status(t, path):
    try:
        return http_get(t, path)
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def test_fastapi_ingress_routes_take_path_query_and_body_parameters(cluster, tmp_path):
    out = run_example(cluster, tmp_path, "ray_serve_fastapi.py")
    assert out == {"hello": {"message": "hello ray"},
                   "item": {"item_id": 42, "detail": True, "currency": "EUR"},
                   "quote": {"name": "book", "total": 36.0, "currency": "EUR"}}
    assert json.loads(http_get(cluster, "/shop/hello")[2]) == {"message": "hello world"}
    status, _, body = _get_status(cluster, "/shop/items/not-a-number")
    assert status == 422 and json.loads(body)["detail"][0]["loc"] == ["path", "item_id"]
    assert _get_status(cluster, "/shop/nowhere")[0] == 404


def test_streamed_chunks_arrive_one_by_one_and_handles_stream_items(cluster, tmp_path):
    out = run_example(cluster, tmp_path, "ray_serve_streaming.py")
    assert [text for _, text in out["chunks"]] == ["0\n", "1\n", "2\n", "3\n"]
    times = [at for at, _ in out["chunks"]]
    # The replica sleeps 0.3 s between chunks: each reached the client before the next was made.
    assert all(later - earlier >= 0.2 for earlier, later in zip(times, times[1:])), times
    assert out["items"] == [0, 1, 2, 3, 4]


def test_errors_status_delete_and_shutdown(cluster, tmp_path):
    out = run_driver(cluster, tmp_path, """
        import json, os
        import ray
        from ray import serve
        from ray.serve.exceptions import RayServeException

        class OutOfStock(Exception):
            pass

        @serve.deployment(num_replicas=2, max_ongoing_requests=3, health_check_period_s=1)
        class Store:
            def buy(self, item):
                if item == "none":
                    raise OutOfStock(f"no {item} left")
                raise ValueError(f"unknown item {item!r}")

            def items(self):
                yield "a"

            def whoami(self):
                ctx = serve.get_replica_context()
                return [ctx.app_name, ctx.deployment, ctx.replica_tag.startswith("run-")]

        @serve.deployment(max_constructor_retry_count=2)
        class Broken:
            def __init__(self):
                raise RuntimeError("cannot load the model")

        out = {}
        handle = serve.run(Store.bind(), name="store", route_prefix="/store")
        for item in ("none", "pear"):
            try:
                handle.buy.remote(item).result()
            except Exception as e:
                out[item] = [type(e).__name__, isinstance(e, ray.exceptions.RayTaskError),
                             isinstance(e, OutOfStock), isinstance(e, ValueError), str(e).splitlines()[-1]]
        for name, call in (("unary_generator", lambda: handle.items.remote().result()),
                           ("missing", lambda: handle.missing.remote().result())):
            try:
                call()
            except Exception as e:
                out[name] = [type(e).__name__, str(e).splitlines()[-1]]
        out["whoami"] = serve.get_app_handle("store").whoami.remote().result()
        try:
            serve.run(Broken.bind(), name="broken", route_prefix="/broken")
        except RuntimeError as e:
            out["broken"] = str(e)
        status = serve.status()
        out["status"] = {name: [app.status.value, {d: [s.status.value, s.status_trigger.value,
                                                       s.replica_states.get("RUNNING", 0)]
                                                   for d, s in app.deployments.items()}]
                         for name, app in status.applications.items() if name in ("store", "broken")}
        out["last_deployed_recent"] = status.applications["store"].last_deployed_time_s > 1.7e9
        try:
            serve.run(Store.bind(), name="other", route_prefix="/store")
        except RayServeException as e:
            out["conflict"] = str(e)
        for call in (lambda: serve.get_app_handle("nope"),
                     lambda: serve.get_deployment_handle("Store"),
                     lambda: serve.get_deployment_handle("Nope", "store"),
                     lambda: serve.get_replica_context()):
            try:
                call()
            except Exception as e:
                out.setdefault("lookups", []).append([type(e).__name__, str(e)])
        serve.delete("broken")
        out["after_delete"] = sorted(serve.status().applications)
        print(json.dumps(out))
    """)
    assert out["none"] == ["RayTaskError(OutOfStock)", True, True, False, "OutOfStock: no none left"]
    assert out["pear"] == ["RayTaskError(ValueError)", True, False, True, "ValueError: unknown item 'pear'"]
    assert out["unary_generator"] == ["RayTaskError(TypeError)",
                                      "TypeError: Method 'items' returned a generator. You must use "
                                      "`handle.options(stream=True)` to call generators on a deployment."]
    assert out["missing"] == ["RayTaskError(RayServeException)",
                              "torus.serve.exceptions.RayServeException: Tried to call a method 'missing' that does "
                              "not exist. Available methods: ['buy', 'items', 'whoami']."]
    assert out["whoami"] == ["store", "Store", True]
    assert out["broken"] == ("Deploying application broken failed: Failed to update the deployments ['Broken'].\n"
                             "Broken: The deployment failed to start 2 times in a row. This may be due to a problem "
                             "with its constructor or initial health check failing. See the replica logs (`torus "
                             "serve status`) for details. Error:\nRuntimeError: cannot load the model")
    assert out["status"] == {
        "store": ["RUNNING", {"Store": ["HEALTHY", "CONFIG_UPDATE_COMPLETED", 2]}],
        "broken": ["DEPLOY_FAILED", {"Broken": ["DEPLOY_FAILED", "REPLICA_STARTUP_FAILED", 0]}]}
    assert out["last_deployed_recent"] is True
    assert out["conflict"] == 'Prefix /store is being used by application "store". Failed to deploy application "other".'
    assert out["lookups"] == [
        ["RayServeException", "Application 'nope' does not exist."],
        ["RayServeException", "Please specify an application name when getting a deployment handle outside of a "
                              "Serve application."],
        ["KeyError", "\"Deployment(name='Nope', app='store') does not exist.\""],
        ["RayServeException", "`serve.get_replica_context()` may only be called from within a Ray Serve "
                              "deployment."]]
    assert "broken" not in out["after_delete"] and "store" in out["after_delete"]
    assert services_of(cluster, "broken") == {}

    out = run_driver(cluster, tmp_path, """
        import json
        from ray import serve
        before = sorted(serve.status().applications)
        serve.shutdown()
        print(json.dumps({"before": before, "after": sorted(serve.status().applications)}))
    """)
    assert "store" in out["before"] and out["after"] == []
    assert [s["name"] for s in api(cluster, "/api/v0/services") if "TORUS_SERVE_APP" in s["spec"].get("env", {})] \
        == []


def test_run_many_deploys_applications_together_and_serve_batch_gathers_concurrent_calls(cluster, tmp_path):
    out = run_driver(cluster, tmp_path, """
        import json
        from ray import serve
        from ray.serve import RunTarget

        @serve.deployment(max_ongoing_requests=16)
        class Batcher:
            def __init__(self):
                self.sizes = []

            @serve.batch(max_batch_size=4, batch_wait_timeout_s=1.0)
            async def double(self, items):
                self.sizes.append(len(items))
                return [2 * x for x in items]

            async def __call__(self, x):
                return await self.double(x)

            def sizes_seen(self):
                return self.sizes

        @serve.deployment
        def hello(request):
            return "hi"

        batcher, greeter = serve.run_many([RunTarget(Batcher.bind(), name="batch", route_prefix="/batch"),
                                           RunTarget(hello.bind(), name="hi", route_prefix="/hi")])
        responses = [batcher.remote(i) for i in range(8)]
        out = {"doubled": [r.result() for r in responses], "sizes": batcher.sizes_seen.remote().result(),
               "apps": sorted(a for a in serve.status().applications if a in ("batch", "hi")),
               "greeter": greeter.deployment_name}
        serve.delete("batch")
        serve.delete("hi")
        print(json.dumps(out))
    """)
    assert out["doubled"] == [0, 2, 4, 6, 8, 10, 12, 14]
    assert sum(out["sizes"]) == 8 and max(out["sizes"]) > 1, out["sizes"]  # calls were batched in the replica
    assert out["apps"] == ["batch", "hi"] and out["greeter"] == "hello"


def test_placement_group_bundles_make_a_gang_whose_rank_0_serves(cluster, tmp_path):
    out = run_driver(cluster, tmp_path, """
        import json, os
        from ray import serve

        @serve.deployment(ray_actor_options={"num_cpus": 1, "runtime_env": {"env_vars": {"MODEL": "tiny"}}},
                          placement_group_bundles=[{"CPU": 1}, {"CPU": 2}], placement_group_strategy="PACK")
        class Sharded:
            def __call__(self, request):
                return {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MODEL")}

        handle = serve.run(Sharded.bind(), name="sharded", route_prefix="/sharded")
        print(json.dumps(handle.remote(None).result()))
        serve.delete("sharded")
    """)
    assert out == {"RANK": "0", "WORLD_SIZE": "2", "MODEL": "tiny"}


def test_tpu_replicas_hold_chips_of_a_slice_roll_on_a_full_cluster_and_a_replica_gang_takes_it_whole(cluster,
                                                                                                    tmp_path):
    out = run_driver(cluster, tmp_path, """
        import json, os
        from ray import serve

        def where():
            return {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "TPU_VISIBLE_CHIPS", "TPU_WORKER_ID")}

        @serve.deployment(ray_actor_options={"resources": {"TPU": 4}})
        class Chips:
            def __call__(self, request):
                return where()

        @serve.deployment(name="Chips", ray_actor_options={"resources": {"TPU": 4}})
        class ChipsV2:
            def __call__(self, request):
                return dict(where(), version=2)

        @serve.deployment
        class WholeSlice:
            def __call__(self, request):
                return where()

        out = {"chips": serve.run(Chips.bind(), name="chips", route_prefix="/chips").remote(None).result()}
        # A new version while the old replica holds the cluster's only slice: it rolls, the old replica leaving.
        out["rolled"] = serve.run(ChipsV2.bind(), name="chips", route_prefix="/chips").remote(None).result()
        serve.delete("chips")  # the whole slice for the next application
        gang = WholeSlice._with_replica_gang({"accelerator_type": "TPU-V5LITEPOD", "topology": "2x4"})
        out["slice"] = serve.run(gang.bind(), name="slice", route_prefix="/slice").remote(None).result()
        print(json.dumps(out))
    """)
    # TPU 4 of the 8-chip host: a gang of two 4-chip processes; rank 0 serves with the first four chips.
    assert out["chips"] == {"RANK": "0", "WORLD_SIZE": "2", "TPU_VISIBLE_CHIPS": "0,1,2,3", "TPU_WORKER_ID": "0"}
    assert out["rolled"] == dict(out["chips"], version=2)
    assert services_of(cluster, "chips") == {}
    # The replica gang given: the whole host, all its chips (no isolation variable).
    assert out["slice"] == {"RANK": "0", "WORLD_SIZE": "1", "TPU_VISIBLE_CHIPS": None, "TPU_WORKER_ID": "0"}
    replica = services_of(cluster, "slice")["WholeSlice"]["spec"]["replica"]
    assert (replica["accelerator_type"], replica["topology"], replica["use_tpu"]) == ("TPU-V5LITEPOD", "2x4", True)


def test_bad_options_are_refused_with_rays_messages():
    sys.path.insert(0, str(REPO / "python"))
    from torus import serve
    from torus.serve.config import AutoscalingConfig

    def f(request):
        return 1

    cases = [
        (lambda: serve.deployment(num_replicas=2, autoscaling_config={"min_replicas": 1, "max_replicas": 3})(f),
         ValueError, "Manually setting num_replicas is not allowed when autoscaling_config is provided."),
        (lambda: serve.deployment(f).options(num_replicas=3, autoscaling_config={"max_replicas": 4}),
         ValueError, "Manually setting num_replicas is not allowed when autoscaling_config is provided."),
        (lambda: serve.deployment(num_replicas=0)(f), ValueError, "num_replicas is expected to larger than 0"),
        (lambda: serve.deployment(num_replicas=-1)(f), ValueError,
         "1 validation error for DeploymentConfig\nnum_replicas\n  Input should be greater than or equal to 0 "
         "[type=greater_than_equal, input_value=-1, input_type=int]"),
        (lambda: serve.deployment(max_ongoing_requests=0)(f), ValueError,
         "1 validation error for DeploymentConfig\nmax_ongoing_requests\n  Input should be greater than 0 "
         "[type=greater_than, input_value=0, input_type=int]"),
        (lambda: serve.deployment(health_check_period_s=-1)(f), ValueError,
         "1 validation error for DeploymentConfig\nhealth_check_period_s\n  Input should be greater than 0 "
         "[type=greater_than, input_value=-1, input_type=int]"),
        (lambda: serve.deployment(graceful_shutdown_timeout_s=-2)(f), ValueError,
         "1 validation error for DeploymentConfig\ngraceful_shutdown_timeout_s\n  Input should be greater than or "
         "equal to 0 [type=greater_than_equal, input_value=-2, input_type=int]"),
        (lambda: serve.deployment(num_replicas="two")(f), ValueError,
         "1 validation error for DeploymentConfig\nnum_replicas\n  Input should be a valid integer, unable to parse "
         "string as an integer [type=int_parsing, input_value='two', input_type=str]"),
        (lambda: serve.deployment(autoscaling_config={"min_replicas": 3, "max_replicas": 2})(f), ValueError,
         "1 validation error for DeploymentConfig\nautoscaling_config\n  Value error, max_replicas (2) must be "
         "greater than or equal to min_replicas (3)! [type=value_error, input_value={'min_replicas': 3, "
         "'max_replicas': 2}, input_type=dict]"),
        (lambda: AutoscalingConfig(min_replicas=2, max_replicas=4, initial_replicas=1), ValueError,
         "1 validation error for AutoscalingConfig\n  Value error, min_replicas (2) must be less than or equal to "
         "initial_replicas (1)! [type=value_error, input_value={'min_replicas': 2, 'max_..., 'initial_replicas': "
         "1}, input_type=dict]"),
        (lambda: serve.deployment(ray_actor_options={"num_cpus": -1})(f), ValueError,
         "The quantity of resource num_cpus cannot be negative"),
        (lambda: serve.deployment(ray_actor_options={"max_restarts": 2})(f), ValueError,
         "Specifying 'max_restarts' in ray_actor_options is not allowed. Allowed options: {'accelerator_type', "
         "'memory', 'num_cpus', 'num_gpus', 'resources', 'runtime_env', 'label_selector', 'fallback_strategy'}"),
        (lambda: serve.deployment(user_config={"a": {1, 2}})(f), ValueError,
         "1 validation error for DeploymentConfig\nuser_config\n  Value error, user_config is not JSON-serializable: "
         "Object of type set is not JSON serializable. [type=value_error, input_value={'a': {1, 2}}, "
         "input_type=dict]"),
        (lambda: serve.deployment(max_ongoing_requests=None)(f), ValueError,
         "`max_ongoing_requests` must be non-null, got None."),
        (lambda: serve.deployment(version="1")(f), ValueError,
         "`version` in `@serve.deployment` has been removed. Serve manages deployment versions internally."),
        (lambda: serve.deployment(name="a#b")(f), ValueError,
         "Deployment names must not contain the '#' character. Current name: a#b."),
        (lambda: serve.deployment(placement_group_strategy="PACK")(f), ValueError,
         "If `placement_group_strategy` is provided, `placement_group_bundles` must also be provided."),
        (lambda: serve.deployment(placement_group_bundles=[{"CPU": 0.5}])(f), ValueError,
         "When using `placement_group_bundles`, the replica actor will be placed in the first bundle, so the "
         "resource requirements for the actor must be a subset of the first bundle. `num_cpus` for the actor is 1, "
         "but the bundle only has 0.5 `CPU` specified."),
        (lambda: serve.deployment(f).bind(1), ValueError, "init_args not supported for function deployments."),
        (lambda: serve.deployment(f)(), RuntimeError,
         "Deployments cannot be constructed directly. Use `deployment.deploy() instead.`"),
        (lambda: serve.run(serve.deployment(f)), TypeError,
         "`serve.run` expects an `Application` returned by `Deployment.bind()`."),
        (lambda: serve.run(serve.deployment(f).bind(), route_prefix="/x/"), ValueError,
         "Invalid route_prefix '/x/', may not end with a trailing '/'."),
        (lambda: serve.ingress(object())(type("WithCall", (), {"__call__": lambda self: 1})), ValueError,
         "Classes passed to @serve.ingress may not have __call__ method."),
        (lambda: serve.deployment(max_replicas_per_node=2)(f), ValueError,
         "max_replicas_per_node: not supported by torus (the head places each replica's gang where it fits; spread "
         "replicas with a label_selector instead)"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind) as raised:
            call()
        assert str(raised.value) == message
    auto = serve.deployment(num_replicas="auto")(f)
    assert auto._deployment_config.autoscaling_config.model_dump(exclude_unset=True) == {
        "min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0}
    assert auto.ray_actor_options == {"num_cpus": 1} and auto.max_ongoing_requests == 5
