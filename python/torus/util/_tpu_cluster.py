"""The cluster's TPU slices as ray.util.tpu (Ray 2.60) reads them from ray.nodes(): the slice of a node, the nodes
of a slice, and how many slices of a shape are intact (every host alive, all chips there, a worker 0) and idle.

They read torus.nodes(), whose "Labels" carry the ray.io/ spelling of the agents' torus.io/ labels, so they answer
as Ray's do; an idle slice is one whose every host has all its TPU chips free in the head's view (GET
/api/v0/nodes), as Ray reads the GCS's available resources per node. One difference: Ray 2.60 counts a slice whose
hosts have no TPU free at all as ready (its per-node map leaves out amounts of 0 and it reads a missing TPU as all
free); torus counts it as busy.

Thread-safety: functions; each makes blocking calls to the head.
"""

import json
import logging
import os
import ssl
import urllib.request

from torus._private import worker as _worker
from torus._private.accelerators import tpu as _shapes
from torus._private.accelerators.tpu_host import POD_TYPE_LABEL, SLICE_NAME_LABEL, WORKER_ID_LABEL

logger = logging.getLogger(__name__)


def get_tpu_slice_name_from_node(node):
    """The TPU slice name of a node as torus.nodes() (or ray.nodes()) lists it, or None."""
    return node.get("Labels", {}).get(SLICE_NAME_LABEL)


def get_tpu_nodes_for_slice(slice_name, nodes=None):
    """The alive nodes of a slice, from `nodes` or else the cluster's ([] when this process is not connected)."""
    if nodes is None:
        if not _worker.is_initialized():
            return []
        nodes = _worker.nodes()
    return [n for n in nodes if n.get("Alive") and get_tpu_slice_name_from_node(n) == slice_name]


def _get_intact_tpu_slices(topology, accelerator_type, tpu_resource_per_chip=1):
    """{slice name: its nodes} for the slices of the shape whose hosts are alive, hold the shape's chips between
    them and include worker 0 (a single-host shape is named by its node's id)."""
    if not _worker.is_initialized():
        return {}
    try:
        pod_type = _shapes.infer_tpu_pod_type_from_topology(topology, accelerator_type)
        if not pod_type:
            return {}
        expected = _shapes.get_num_chips_from_topology(topology) * tpu_resource_per_chip
        if expected <= 0:
            return {}
    except Exception as e:  # noqa: BLE001 - as Ray: a shape it cannot read has no slices
        logger.warning(f"Failed to parse TPU topology for integrity check: {e}")
        return {}
    by_slice = {}
    for node in _worker.nodes():
        if not node.get("Alive"):
            continue
        if (node.get("Labels") or {}).get(POD_TYPE_LABEL) != pod_type:
            continue
        single_host = expected <= (node.get("Resources") or {}).get("TPU", 0)
        name = node.get("NodeID") if single_host else get_tpu_slice_name_from_node(node)
        if name:
            by_slice.setdefault(name, []).append(node)
    intact = {}
    for name, members in by_slice.items():
        if sum((n.get("Resources") or {}).get("TPU", 0) for n in members) != expected:
            continue
        has_head = any((n.get("Labels") or {}).get(WORKER_ID_LABEL) == "0" for n in members) or len(members) == 1
        if has_head:
            intact[name] = members
    return intact


def _head_get(path):
    """GET a JSON route of the head's HTTP API with the cluster token (https with the cluster CA under TLS)."""
    state = _worker.state_or_init()
    address = _worker.http_address(state)
    ca = os.environ.get("TORUS_TLS_CA")
    request = urllib.request.Request(f"{'https' if ca else 'http'}://{address}{path}",
                                     headers={"Authorization": f"Bearer {state.token}"})
    context = ssl.create_default_context(cafile=ca) if ca else None
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        return json.loads(answer.read())


def available_resources_per_node():
    """{node id: {resource: amount free}} of the alive nodes, as the head sees them (Ray's
    ray._private.state.available_resources_per_node)."""
    return {n["node_id"]: dict(n.get("resources_available") or {}) for n in _head_get("/api/v0/nodes?state=ALIVE")}


def tpu_idle(node, available):
    """Whether every TPU chip of a node (of torus.nodes()) is free in `available` (available_resources_per_node()).
    A node listed without TPU has none free (amounts of 0 are left out); one not listed yet just joined."""
    total = node.get("Resources", {}).get("TPU", 0)
    listed = available.get(node.get("NodeID"))
    return (total if listed is None else listed.get("TPU", 0)) >= total


def get_num_ready_tpu_slices(topology, accelerator_type, tpu_resource_per_chip=None):
    """How many slices of the shape are intact and idle (every host has all its TPU chips free)."""
    if tpu_resource_per_chip is None:
        tpu_resource_per_chip = _shapes.get_tpu_resource_per_chip()
    intact = _get_intact_tpu_slices(topology, accelerator_type, tpu_resource_per_chip)
    if not intact:
        return 0
    available = available_resources_per_node()
    ready = 0
    for members in intact.values():
        ready += all(tpu_idle(n, available) for n in members)
    return ready


def get_num_tpu_slices(topology, accelerator_type, tpu_resource_per_chip=None):
    """How many slices of the shape are intact, busy or not."""
    if tpu_resource_per_chip is None:
        tpu_resource_per_chip = _shapes.get_tpu_resource_per_chip()
    return len(_get_intact_tpu_slices(topology, accelerator_type, tpu_resource_per_chip))
