"""ray.util.tpu on a cluster of two simulated v6e 4x4 slices (v6e-0 and v6e-1, 4 hosts of 4 chips each, plus a head
without TPUs): the nodes' TPU labels, the slice helpers, and SlicePlacementGroup / slice_placement_group /
run_on_slice — per-host and per-chip bundles, multislice, pg_per_slice, a user's slice selector, a reservation
that cannot be had, and Ray's errors.

Slices are free to be chosen in any order by either system, so cases record which slices were held and what ran
where as sets and counts, never the order of node ids.
"""

import collections
import functools
import os
import time

import ray
import ray.util.tpu as tpu
from harness import case, out, raised
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

CLUSTER = {"accelerator": "v6e", "topology": "4x4", "slices": 2}
INIT = {}  # the cluster of RAY_ADDRESS (Ray) or TORUS_ADDRESS (torus)
SLICE = "ray.io/tpu-slice-name"


@ray.remote(num_cpus=0)
def where():
    """(node id, TPU_NAME, get_current_pod_name(), TPU_VISIBLE_CHIPS) where this runs."""
    import ray.util.tpu as t
    return (ray.get_runtime_context().get_node_id(), os.environ.get("TPU_NAME"), t.get_current_pod_name(),
            os.environ.get("TPU_VISIBLE_CHIPS"))


def hosts(ran):
    """(slice, TPU worker id) of each result's node, from its labels (a worker holding part of a host sees
    TPU_WORKER_ID=0 under torus, as GKE gives a single-host slice), checking the host's environment agrees on the
    slice."""
    labels = {n["NodeID"]: n["Labels"] for n in ray.nodes()}
    out_ = []
    for node, env_name, pod_name, _ in ran:
        slice_name = labels[node].get(SLICE)
        assert env_name == pod_name == slice_name, (env_name, pod_name, slice_name)
        out_.append((slice_name, labels[node].get("ray.io/tpu-worker-id")))
    return out_


def on_bundles(pg, count, tpus):
    strategy = [PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)
                for i in range(count)]
    return ray.get([where.options(resources={"TPU": tpus}, scheduling_strategy=s).remote() for s in strategy],
                   timeout=120)


def eventually(fn, want, timeout=30):
    """fn() once it equals `want` (the resource views both systems read catch up a moment later), else its last."""
    deadline = time.monotonic() + timeout
    value = fn()
    while value != want and time.monotonic() < deadline:
        time.sleep(0.5)
        value = fn()
    return value


_handles = []


def held(spg):
    """spg, shut down when its case ends (however it ends), so that a failed case leaves the slices free."""
    _handles.append(spg)
    return spg


def releasing(fn):
    @functools.wraps(fn)
    def run():
        try:
            return fn()
        finally:
            while _handles:
                _handles.pop().shutdown()
    return run


def ready_slices():
    return tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E")


@case
def node_labels():
    nodes = [n for n in ray.nodes() if n["Alive"]]
    out(all(n["Labels"].get("ray.io/node-id") == n["NodeID"] for n in nodes))
    tpu_hosts = sorted((n["Labels"][SLICE], n["Labels"]["ray.io/tpu-worker-id"], n["Labels"]["ray.io/tpu-topology"],
                        n["Labels"]["ray.io/tpu-pod-type"], n["Labels"]["ray.io/accelerator-type"],
                        n["Resources"].get("TPU")) for n in nodes if SLICE in n["Labels"])
    out(tpu_hosts, len(nodes) - len(tpu_hosts))


@case
def slice_helpers():
    out(sorted(str(tpu.get_tpu_slice_name_from_node(n)) for n in ray.nodes()))
    out(sorted(n["Labels"]["ray.io/tpu-worker-id"] for n in tpu.get_tpu_nodes_for_slice("v6e-1")),
        tpu.get_tpu_nodes_for_slice("v6e-9"))
    out(tpu.get_num_tpu_slices("4x4", "TPU-V6E"), tpu.get_num_tpu_slices("4x4", "v6e"),
        tpu.get_num_tpu_slices("2x4", "TPU-V6E"), tpu.get_num_tpu_slices("2x2x2", "TPU-V4"))
    out(eventually(ready_slices, 2))


@case
def task_on_a_labelled_host():
    on = where.options(label_selector={SLICE: "v6e-1", "ray.io/tpu-worker-id": "2"})
    out(hosts([ray.get(on.remote(), timeout=60)]))


@case(timeout=180)
@releasing
def one_slice_per_host_bundles():
    spg = held(tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e"))
    out(spg.num_hosts, spg.num_bundles, spg.chips_per_host, spg.devices_per_host, spg.bundle_resources,
        spg.topology, spg.accelerator_version, spg.num_slices, spg.tpu_resource_per_chip)
    names = {s[SLICE] for s in spg.bundle_label_selector}
    out(len(spg.bundle_label_selector), len(names), names <= {"v6e-0", "v6e-1"},
        all(list(s) == [SLICE] for s in spg.bundle_label_selector))
    pg = spg.placement_group
    out(pg is spg.slice_placement_group, pg.bundle_specs, pg.bundle_count)
    e = raised(lambda: spg.slice_placement_groups)
    out(type(e).__name__, str(e))
    out(ray.get(pg.ready(), timeout=60) == pg, pg.wait(10))
    ran = hosts(on_bundles(pg, spg.num_bundles, 4))
    out(sorted(w for _, w in ran), {s for s, _ in ran} == names)
    ran = hosts(ray.get(tpu.run_on_slice(where, tpu_slice=spg), timeout=120))
    out(sorted(w for _, w in ran), {s for s, _ in ran} == names)
    spg.release_head_pgs()
    spg.release_head_pgs(0)
    e = raised(spg.release_head_pgs, 1)
    out(type(e).__name__, str(e))
    spg.shutdown()
    spg.shutdown()
    out(spg.placement_group)
    out(eventually(ready_slices, 2))


@case(timeout=180)
@releasing
def multislice_one_group():
    spg = held(tpu.slice_placement_group("4x4", "v6e", num_slices=2, name="both"))
    out(spg.num_hosts, spg.num_bundles, spg.num_slices, spg.bundle_resources)
    per_bundle = [s[SLICE] for s in spg.bundle_label_selector]
    out(sorted(set(per_bundle)), per_bundle[:4] == [per_bundle[0]] * 4, per_bundle[4:] == [per_bundle[4]] * 4)
    ran = hosts(on_bundles(spg.placement_group, spg.num_bundles, 4))
    out([s for s, _ in ran] == per_bundle, sorted(ran))
    # Both slices are held: one more cannot be had within its wait.
    e = raised(tpu.SlicePlacementGroup, topology="4x4", accelerator_version="v6e", head_reservation_timeout_s=1)
    out(type(e).__name__, str(e).split(" Ensure")[0])
    spg.shutdown()
    out(eventually(ready_slices, 2))


@case(timeout=180)
@releasing
def per_chip_bundles():
    spg = held(tpu.slice_placement_group("4x4", "v6e", resources_per_bundle={"TPU": 1}))
    out(spg.num_hosts, spg.num_bundles, spg.chips_per_host, spg.bundle_resources, len(spg.bundle_label_selector))
    raw = on_bundles(spg.placement_group, spg.num_bundles, 1)
    ran = hosts(raw)
    chips = [(h, c) for h, (_, _, _, c) in zip(ran, raw)]
    out(len({s for s, _ in ran}), sorted(collections.Counter(w for _, w in ran).items()), len(set(chips)),
        sorted({c for _, c in chips}))
    spg.shutdown()
    out(eventually(ready_slices, 2))


@case(timeout=180)
@releasing
def one_group_per_slice():
    spg = held(tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e", num_slices=2, pg_per_slice=True,
                                       resources_per_bundle={"TPU": 2}, name="each"))
    out(spg.num_bundles, spg.bundle_resources, len(spg.slice_placement_groups))
    for attr in ("slice_placement_group", "placement_group"):
        e = raised(lambda: getattr(spg, attr))
        out(type(e).__name__, str(e))
    groups = spg.slice_placement_groups
    out([pg.bundle_count for pg in groups])
    per_group = [hosts(on_bundles(pg, pg.bundle_count, 2)) for pg in groups]
    out([len({s for s, _ in ran}) for ran in per_group], len({ran[0][0] for ran in per_group}),
        [sorted(w for _, w in ran) for ran in per_group])
    out([s[SLICE] for s in spg.bundle_label_selector] == [per_group[0][0][0]] * 8 + [per_group[1][0][0]] * 8)
    spg.release_head_pgs(1)
    e = raised(spg.release_head_pgs, 2)
    out(type(e).__name__, str(e))
    spg.shutdown()
    out(eventually(ready_slices, 2))


@case(timeout=180)
@releasing
def a_named_slice():
    spg = held(tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e",
                                       bundle_label_selector=[{SLICE: "v6e-1"}] * 4))
    out(spg.bundle_label_selector)
    out(sorted(hosts(on_bundles(spg.placement_group, 4, 4))))
    spg.shutdown()


@case(timeout=180)
def placement_group_arguments_refused_as_ray_does():
    for kw in [{"strategy": "FOO"}, {"lifetime": "forever"},
               {"bundle_label_selector": [{SLICE: "v6e-0", "bad key!": "x"}] * 4}]:
        e = raised(tpu.SlicePlacementGroup, topology="4x4", accelerator_version="v6e", **kw)
        out(kw, type(e).__name__, str(e).split(" Supported")[0].split(" Detailed")[0])
    out(eventually(ready_slices, 2))


@case(timeout=120)
def a_busy_host_makes_its_slice_not_ready():
    pg = placement_group([{"TPU": 1}], bundle_label_selector=[{SLICE: "v6e-0", "ray.io/tpu-worker-id": "2"}])
    ray.get(pg.ready(), timeout=60)
    out(eventually(ready_slices, 1), tpu.get_num_tpu_slices("4x4", "TPU-V6E"))
    remove_placement_group(pg)
    out(eventually(ready_slices, 2))


@case(timeout=180)
def subslices():
    for args in [("3x3", "v6e"), ("4x4", "v6e"), ("2x4", "v9")]:
        e = raised(tpu.subslice_placement_group, *args)
        out(args, type(e).__name__, str(e))
    # Finding a 4x4's tiles asks libtpu on its hosts for their chip coordinates; these hosts have no libtpu.
    e = raised(tpu.subslice_placement_group, "2x4", "v6e", head_reservation_timeout_s=60)
    out(isinstance(e, RuntimeError), "libtpu is required for TPU subslice discovery" in str(e))
    out(eventually(ready_slices, 2))
