"""A deployment's torus service spec (POST /api/v0/services; docs/serving.md): what serve.run deploys for each
deployment of an application.

    replica       Deployment._with_replica_gang's spec when given; else placement_group_bundles as a gang of one
                  process per bundle (each bundle reserved as the largest of them when they differ); else one
                  process with ray_actor_options' num_cpus, num_gpus, memory and resources. TPU chips ({"TPU": n})
                  take a whole slice (TpuShape), split into processes of n chips. accelerator_type and
                  label_selector become the gang's label_selector.
    entrypoint    [the driver's interpreter, -m, torus.serve._replica]; the deployment travels as a package
                  (py_modules) holding it pickled.
    num_replicas  or autoscaling from autoscaling_config (initial_replicas defaulting to min_replicas, as Ray).
    health        /-/healthz every health_check_period_s, failing after health_check_timeout_s.
    env           ray_actor_options' runtime_env env_vars, the driver's PYTHONPATH, and Ray's names
                  (TORUS_SERVE_APP, TORUS_SERVE_DEPLOYMENT, TORUS_SERVE_INGRESS, TORUS_SERVE_ROUTE_PREFIX) that
                  serve.status() reads back.

Replicas answer requests as they come, so a service waits no longer than a day for a reply (request_timeout_s)
and takes bodies up to 1 GiB (Ray sets neither limit). Pure functions; thread-safe.
"""

import sys
from dataclasses import dataclass
from typing import List, Optional

from torus.serve._private import naming

HEALTH_PATH = "/-/healthz"
REQUEST_TIMEOUT_S = 86400
MAX_REQUEST_BYTES = "1Gi"
MAX_QUEUED_REQUESTS = 1_000_000  # Ray's -1 (no limit): the most a service takes
TOPOLOGY_KEYS = ("ray.io/tpu-topology", "torus.io/tpu-topology")
ACCELERATOR_KEYS = ("ray.io/accelerator-type", "torus.io/accelerator-type")


@dataclass(frozen=True)
class TpuShape:
    """A slice shape the cluster has: accelerator type ("TPU-V6E"), topology ("2x4"), chips per host, hosts."""
    accelerator_type: str
    topology: str
    chips_per_host: int
    hosts: int


@dataclass
class SpecInput:
    app_name: str
    app_route_prefix: Optional[str]
    is_ingress: bool
    package_uri: str
    python_path: str
    working_dir: str = ""           # a package URI, when the deployment's runtime_env has one
    ray_alias: bool = False
    tpu_shapes: tuple = ()          # the cluster's, for replicas that ask for TPU chips


def service_spec(deployment, given: SpecInput) -> dict:
    """The service spec of `deployment` (built: its name final, its handles in place)."""
    config = deployment._deployment_config
    rc = deployment._replica_config
    service = naming.service_name(given.app_name, deployment.name)
    options = rc.ray_actor_options or {}
    env = {"PYTHONPATH": given.python_path, "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": str(max(1, int(options.get("num_cpus") or 1))),
           "TORUS_SERVE_APP": given.app_name, "TORUS_SERVE_DEPLOYMENT": deployment.name,
           "TORUS_SERVE_INGRESS": "1" if given.is_ingress else "0",
           "TORUS_SERVE_ROUTE_PREFIX": given.app_route_prefix if given.app_route_prefix is not None else "",
           "TORUS_SERVE_CONSTRUCTOR_RETRIES": str(config.max_constructor_retry_count)}
    if given.ray_alias:
        env["TORUS_RAY_ALIAS"] = "1"
    env.update(((options.get("runtime_env") or {}).get("env_vars")) or {})
    spec = {"name": service,
            "route_prefix": naming.route_prefix_of(service, given.is_ingress, given.app_route_prefix),
            "entrypoint": [sys.executable, "-m", "torus.serve._replica"],
            "env": env,
            "py_modules": [given.package_uri],
            "replica": replica_gang(rc, given.tpu_shapes),
            "health_path": HEALTH_PATH,
            "health_check_period_s": max(0.1, float(config.health_check_period_s)),
            "health_check_timeout_s": max(0.1, float(config.health_check_timeout_s)),
            "graceful_shutdown_timeout_s": min(3600.0, float(config.graceful_shutdown_timeout_s)),
            "request_timeout_s": REQUEST_TIMEOUT_S,
            "max_request_bytes": MAX_REQUEST_BYTES,
            "max_queued_requests": (MAX_QUEUED_REQUESTS if config.max_queued_requests == -1
                                    else config.max_queued_requests)}
    if given.working_dir:
        spec["working_dir"] = given.working_dir
    autoscaling = config.autoscaling_config
    if autoscaling is not None:
        spec["autoscaling"] = {
            "min_replicas": autoscaling.min_replicas, "max_replicas": autoscaling.max_replicas,
            "initial_replicas": (autoscaling.initial_replicas if autoscaling.initial_replicas is not None
                                 else autoscaling.min_replicas),
            "target_ongoing_requests": autoscaling.target_ongoing_requests or 2.0,
            "upscale_delay_s": autoscaling.upscale_delay_s, "downscale_delay_s": autoscaling.downscale_delay_s}
    else:
        spec["num_replicas"] = config.num_replicas
    return spec


def replica_gang(rc, tpu_shapes=()) -> dict:
    """The service's `replica` for a ReplicaConfig (see the module's docstring)."""
    if rc.replica_gang is not None:
        return dict(rc.replica_gang)
    options = rc.ray_actor_options or {}
    selector = dict(options.get("label_selector") or {})
    if options.get("accelerator_type"):
        selector.setdefault("ray.io/accelerator-type", options["accelerator_type"])
    if rc.placement_group_bundles:
        bundles = rc.placement_group_bundles
        per_worker = {}
        for bundle in bundles:
            for name, amount in bundle.items():
                if amount:
                    per_worker[name] = max(per_worker.get(name, 0), amount)
        group_selectors = rc.placement_group_bundle_label_selector or []
        if group_selectors:
            if any(s != group_selectors[0] for s in group_selectors):
                raise ValueError("placement_group_bundle_label_selector: torus gives every process of a replica the "
                                 "same selector; give one selector (or the same for every bundle), got "
                                 f"{group_selectors}")
            selector.update(group_selectors[0])
        return _gang(per_worker, len(bundles), rc.placement_group_strategy or "PACK", selector, tpu_shapes,
                     "placement_group_bundles")
    per_worker = {"CPU": options.get("num_cpus", 1)}
    if options.get("num_gpus"):
        per_worker["GPU"] = options["num_gpus"]
    if options.get("memory"):
        per_worker["memory"] = options["memory"]
    per_worker.update(options.get("resources") or {})
    return _gang(per_worker, 1, "PACK", selector, tpu_shapes, "ray_actor_options")


def _gang(per_worker, workers, strategy, selector, tpu_shapes, field):
    per_worker = {k: v for k, v in per_worker.items() if v}
    tpu = per_worker.get("TPU")
    if tpu:
        return _tpu_gang(per_worker, workers, selector, tpu_shapes, field)
    gang = {"num_workers": workers, "resources_per_worker": per_worker or {"CPU": 0.0001},
            "placement_strategy": strategy}
    if per_worker.get("GPU"):
        gang["use_gpu"] = True
    if selector:
        gang["label_selector"] = selector
    return gang


def _tpu_gang(per_worker, workers, selector, tpu_shapes, field):
    chips = per_worker["TPU"]
    if chips != int(chips) or int(chips) < 1:
        raise ValueError(f"{field}: TPU is counted in whole chips, got {chips}")
    chips = int(chips)
    selector = dict(selector)
    accelerator = next((selector.pop(k) for k in ACCELERATOR_KEYS if k in selector), None)
    topology = next((selector.pop(k) for k in TOPOLOGY_KEYS if k in selector), None)
    shape = pick_tpu_shape(chips, workers, accelerator, topology, tpu_shapes)
    if shape is None:
        have = ", ".join(f"{s.accelerator_type} {s.topology} ({s.chips_per_host} chips per host)"
                         for s in tpu_shapes) or "none"
        wanted = f"{workers} x {chips} chips" if workers > 1 else f"{chips} chips"
        raise ValueError(f"{field}: a replica of {wanted} takes a whole TPU slice on torus, and the cluster has no "
                         f"slice{' of ' + accelerator if accelerator else ''}"
                         f"{' ' + topology if topology else ''} whose hosts hold a multiple of {chips} chips "
                         f"with room for {workers} such processes (slices: {have}); give accelerator_type and "
                         f"label_selector {{'ray.io/tpu-topology': ...}} of a slice, or use _with_replica_gang")
    gang = {"accelerator_type": shape.accelerator_type, "topology": shape.topology,
            "resources_per_worker": dict(per_worker, TPU=chips)}
    if selector:
        gang["label_selector"] = selector
    return gang


def pick_tpu_shape(chips: int, workers: int, accelerator: Optional[str], topology: Optional[str],
                   shapes) -> Optional[TpuShape]:
    """The smallest slice shape (fewest chips, then by name) whose hosts split into processes of `chips` chips and
    that has room for `workers` of them; accelerator and topology, when given, must match. With both given and no
    such slice known, that shape is taken as asked (the head then says whether it can be had)."""
    fits = [s for s in shapes
            if (accelerator is None or s.accelerator_type.upper() == accelerator.upper())
            and (topology is None or s.topology == topology)
            and (s.chips_per_host % chips == 0) and s.hosts * s.chips_per_host // chips >= workers]
    if fits:
        return min(fits, key=lambda s: (s.hosts * s.chips_per_host, s.accelerator_type, s.topology))
    if accelerator and topology:
        return TpuShape(accelerator.upper(), topology, chips, 1)
    return None


def tpu_shapes_of(nodes) -> List[TpuShape]:
    """The distinct slice shapes among ray.nodes()-shaped nodes (their labels and TPU resource)."""
    slices = {}
    for node in nodes:
        labels = node.get("Labels") or {}
        name = labels.get("torus.io/tpu-slice-name")
        chips = int((node.get("Resources") or {}).get("TPU", 0))
        if not name or not chips:
            continue
        entry = slices.setdefault(name, [labels.get("torus.io/accelerator-type", ""),
                                         labels.get("torus.io/tpu-topology", ""), chips, 0])
        entry[3] += 1
    return sorted({TpuShape(a, t, c, h) for a, t, c, h in slices.values() if a and t})
