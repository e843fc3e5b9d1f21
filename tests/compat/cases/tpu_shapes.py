"""ray.util.tpu without a cluster: the public names and their signatures, the shape arithmetic (versions, chips,
hosts, pod types, worker resources, slices for workers, coordinator variables), the host helpers off a TPU host and
with the GKE environment, node-dict helpers on given lists, and the errors SlicePlacementGroup, slice_placement_group
and run_on_slice raise before they touch a cluster."""

import inspect
import os
import warnings

import ray
import ray.util.tpu as tpu
from harness import case, out, raised

INIT = None  # nothing here needs a cluster

PUBLIC = ["DEFAULT_MEGASCALE_PORT", "DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S", "SlicePlacementGroup",
          "SubslicePlacementGroup", "TPU_SUBSLICE_LABEL_PREFIX", "VALID_TPU_TYPES", "dispatch",
          "get_chips_per_host", "get_current_pod_name", "get_current_pod_worker_count", "get_num_chips_from_topology",
          "get_num_ready_tpu_slices", "get_num_tpu_chips_on_node", "get_num_tpu_slices",
          "get_tpu_coordinator_env_vars", "get_tpu_nodes_for_slice", "get_tpu_num_slices_for_workers",
          "get_tpu_resource_per_chip", "get_tpu_slice_name_from_node", "get_tpu_version_from_type",
          "get_tpu_worker_resources", "infer_tpu_pod_type_from_topology", "init_jax_profiler", "run_on_slice",
          "slice_placement_group", "subslice_placement_group"]

TOPOLOGIES = ["1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "16x16", "2x2x1", "2x2x2", "2x2x4", "4x4x4", "4x5", " 4X4 ",
              "16x32", "12x12x16", "ax2", ""]
TYPES = ["v6e", "TPU-V6E", "tpu-v6e", "V6E", "v5litepod", "TPU-V5LITEPOD", "v4", "TPU-V4", "v5p", "v7x", "tpu7x",
         "TPU-V7X", "v2", "v3", "v9", "x"]


def result(fn, *args, **kwargs):
    """fn's value, or [error type, message]."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the case compares it
        return [type(e).__name__, str(e)]


def params(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    return [(p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default))
            for p in inspect.signature(target).parameters.values() if p.name != "self"]


@case
def public_names_and_signatures():
    for name in PUBLIC:
        obj = getattr(tpu, name, None)
        out(name, repr(obj) if isinstance(obj, (int, float, str, tuple)) else params(obj) if callable(obj) else None)


@case
def slice_handle_properties_exist():
    for cls, names in [(tpu.SlicePlacementGroup, ["placement_group", "slice_placement_group", "slice_placement_groups",
                                                  "chips_per_host", "devices_per_host", "num_hosts", "num_bundles",
                                                  "topology", "accelerator_version", "num_slices",
                                                  "head_placement_groups", "bundle_label_selector",
                                                  "bundle_resources", "tpu_resource_per_chip"]),
                       (tpu.SubslicePlacementGroup, ["placement_group", "parent_topology", "subslice_topology",
                                                     "subslice_index", "slice_name", "num_hosts", "chips_per_host",
                                                     "bundle_resources", "head_placement_groups",
                                                     "bundle_label_selector"])]:
        out([(n, isinstance(inspect.getattr_static(cls, n, None), property)) for n in names])
        out(params(cls.release_head_pgs), params(cls.shutdown))


@case
def tpu_version_from_type():
    for t in TYPES + ["v6e-16", "tpu7x-8", ""]:
        out(t, result(tpu.get_tpu_version_from_type, t))


@case
def chips_hosts_and_pod_types():
    for topology in TOPOLOGIES:
        out(topology, result(tpu.get_num_chips_from_topology, topology))
        for t in TYPES:
            out(result(tpu.get_chips_per_host, topology, t), result(tpu.infer_tpu_pod_type_from_topology, topology, t))
    out(tpu.infer_tpu_pod_type_from_topology("", "v6e"), tpu.infer_tpu_pod_type_from_topology("4x4", None))


@case
def worker_resources():
    variants = [{}, {"resources_per_worker": {"TPU": 1}}, {"resources_per_worker": {"TPU": 2, "CPU": 0.5}},
                {"num_slices": 2}, {"chips_per_vm": 4}, {"chips_per_vm": 8}, {"chips_per_vm": 0},
                {"resources_per_worker": {"TPU": 3}}, {"resources_per_worker": {"TPU": 0}},
                {"resources_per_worker": {"TPU": 8}}, {"resources_per_worker": {"memory": 5}},
                {"tpu_resource_per_chip": 2}, {"tpu_resource_per_chip": 0}]
    for topology in ["1x1", "2x4", "4x4", "4x8", "2x2x2", "2x2x1", "4x5"]:
        for t in ["v6e", "TPU-V5LITEPOD", "v4", "tpu7x", "v9"]:
            for kw in variants:
                out(topology, t, kw, result(tpu.get_tpu_worker_resources, topology, t, **kw))


@case
def slices_for_workers():
    for topology, t in [("4x4", "v6e"), ("2x2x2", "TPU-V4"), ("2x4", "v6e"), ("", "v6e"), ("4x4", ""),
                        ("4x5", "v9")]:
        for n in [0, 1, 4, 5, 8, 16, 17, 33]:
            out(result(tpu.get_tpu_num_slices_for_workers, topology, t, n),
                result(tpu.get_tpu_num_slices_for_workers, topology, t, n, resources_per_worker={"TPU": 1}),
                result(tpu.get_tpu_num_slices_for_workers, topology, t, n, resources_per_worker={"TPU": 3}),
                result(tpu.get_tpu_num_slices_for_workers, topology, t, n, tpu_resource_per_chip=2))


@case
def coordinator_env_vars():
    out(tpu.get_tpu_coordinator_env_vars("10.0.0.1", 2, 1))
    out(tpu.get_tpu_coordinator_env_vars("host-0", 4, 3, coordinator_port="9000"))


@case
def resource_per_chip_from_the_environment():
    saved = os.environ.pop("RAY_TPU_RESOURCE_PER_CHIP", None)
    try:
        out(tpu.get_tpu_resource_per_chip())
        for value in ["2", "1", "0", "x", "-1", ""]:
            os.environ["RAY_TPU_RESOURCE_PER_CHIP"] = value
            out(value, result(tpu.get_tpu_resource_per_chip))
    finally:
        os.environ.pop("RAY_TPU_RESOURCE_PER_CHIP", None)
        if saved is not None:
            os.environ["RAY_TPU_RESOURCE_PER_CHIP"] = saved


GKE = {"TPU_NAME": "my-slice", "TPU_WORKER_ID": "2", "TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "4x4"}


@case
def host_helpers_off_and_on_a_tpu_pod():
    # Off TPUs (no TPU_* in the environment and no TPU device files here).
    out(tpu.get_current_pod_name(), tpu.get_num_tpu_chips_on_node())
    saved = {k: os.environ.get(k) for k in GKE}
    os.environ.update(GKE)
    try:
        # The GKE environment names the slice; this machine has no chips, so the host count is unknown.
        out(tpu.get_current_pod_name(), tpu.get_num_tpu_chips_on_node(), tpu.get_current_pod_worker_count())
        os.environ["TPU_NAME"] = ""
        out(tpu.get_current_pod_name())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


NODES = [
    {"NodeID": "a", "Alive": True, "Labels": {"ray.io/tpu-slice-name": "s0", "ray.io/tpu-worker-id": "0"}},
    {"NodeID": "b", "Alive": True, "Labels": {"ray.io/tpu-slice-name": "s0", "ray.io/tpu-worker-id": "1"}},
    {"NodeID": "c", "Alive": False, "Labels": {"ray.io/tpu-slice-name": "s0", "ray.io/tpu-worker-id": "2"}},
    {"NodeID": "d", "Alive": True, "Labels": {"ray.io/tpu-slice-name": "s1"}},
    {"NodeID": "e", "Alive": True, "Labels": {}},
    {"NodeID": "f", "Alive": True},
]


@case
def node_dict_helpers():
    out([tpu.get_tpu_slice_name_from_node(n) for n in NODES])
    out([n["NodeID"] for n in tpu.get_tpu_nodes_for_slice("s0", NODES)],
        [n["NodeID"] for n in tpu.get_tpu_nodes_for_slice("s1", NODES)], tpu.get_tpu_nodes_for_slice("s9", NODES))


@case
def cluster_helpers_before_init():
    out(ray.is_initialized(), tpu.get_tpu_nodes_for_slice("s0"), tpu.get_num_tpu_slices("4x4", "TPU-V6E"),
        tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E"), ray.is_initialized())


@case
def slice_placement_group_errors_before_reserving():
    attempts = [
        dict(topology="4x4", accelerator_version="v9"),
        dict(topology="4x5", accelerator_version="v6e"),
        dict(topology="2x2x2", accelerator_version="v6e"),
        dict(topology="4x4", accelerator_version="TPU-V4"),
        dict(topology="4x4", accelerator_version="v6e", chips_per_vm=0),
        dict(topology="4x4", accelerator_version="v6e", resources_per_bundle={"TPU": 3}),
        dict(topology="4x4", accelerator_version="v6e", resources_per_bundle={"TPU": 0}),
        dict(topology="4x4", accelerator_version="v6e", resources_per_bundle={"TPU": 32}),
        dict(topology="4x4", accelerator_version="v6e", tpu_resource_per_chip=0),
        dict(topology="4x4", accelerator_version="v6e", bundle_label_selector=[{"a": "b"}] * 3),
        dict(topology="4x4", accelerator_version="v6e", num_slices=2, bundle_label_selector=[{}] * 4),
    ]
    for kw in attempts:
        for make in (tpu.SlicePlacementGroup, tpu.slice_placement_group):
            e = raised(make, **kw)
            out(kw, type(e).__name__, str(e))
    e = raised(tpu.slice_placement_group, "4x4", "v6e", not_an_option=1)
    out(type(e).__name__, "not_an_option" in str(e))
    # (Ray's slice_placement_group starts a local cluster on its way in, even for arguments it refuses; torus's
    # starts nothing: no case after this one reads whether one runs.)


@case
def run_on_slice_errors_before_reserving():
    @ray.remote
    def f():
        return 1

    def plain():
        return 1

    for args, kw in [((plain,), {"topology": "4x4", "accelerator_version": "v6e"}), ((f,), {}),
                     ((f,), {"topology": "4x4"}), ((f,), {"slice_index": 0, "topology": "4x4",
                                                          "accelerator_version": "v6e"})]:
        e = raised(tpu.run_on_slice, *args, **kw)
        out(type(e).__name__, str(e))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        e = raised(tpu.dispatch, plain)
    out(type(e).__name__, [issubclass(w.category, DeprecationWarning) for w in seen],
        ["'dispatch' is deprecated and has been renamed to 'run_on_slice'" in str(w.message) for w in seen])


@case
def jax_profiler_without_jax():
    out(tpu.init_jax_profiler(), tpu.init_jax_profiler(port=9998))


@case
def chip_request_validation():
    manager = tpu.TPUAcceleratorManager
    out(manager.get_resource_name(), manager.get_visible_accelerator_ids_env_var())
    for q in [1, 2, 3, 4, 8, 16, 0.5]:
        out(q, list(manager.validate_resource_request_quantity(q)))
    for t in ["v6e-16", "tpu7x-8", "v5litepod-8", "v6e", "TPU-V6E", "v6e-16-x"]:
        out(t, manager.is_valid_tpu_accelerator_type(t))
    for v, topology in [("v6e", "4x4"), ("TPU-V6E", "4x4"), ("V5P", "2x2x2"), ("v6e", "2x2x2"), ("v7x", "2x2x1"),
                        ("tpu7x", "2x2x1"), ("v9", "4x4")]:
        out(v, topology, manager.is_valid_tpu_accelerator_topology(v, topology))
