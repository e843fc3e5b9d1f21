"""What the current TPU host is and what this process may use of it (as Ray 2.60's TPUAcceleratorManager answers):
the slice name, worker id, topology, pod type and chip count of the host, read in this order:

1. the GKE environment (TPU_NAME, TPU_WORKER_ID, TPU_TOPOLOGY, TPU_ACCELERATOR_TYPE), as Ray reads it first;
2. when this process is connected to a torus cluster (a driver after init(), every task and actor worker): what
   its node's agent detected and advertises (the torus.io/tpu-* labels and the node's TPU resource), so that a
   worker whose agent read the facts from GCE metadata or a simulated device root answers alike;
3. otherwise GCE metadata (skipped when TPU_SKIP_MDS_QUERY=true, 1 s timeout) and this machine's device files
   (/dev/accel*, else /dev/vfio groups of Google's PCI vendor 0x1ae0), as Ray does.

The chip count is the host's, whatever part of it this process holds (TPU_VISIBLE_CHIPS says that part), as Ray's
get_current_node_num_accelerators counts the host's device files.

Thread-safety: the node lookup is cached per process under a lock; everything else reads the environment.
"""

import glob
import logging
import os
import re
import threading
import urllib.request

from torus._private.accelerators import tpu as _shapes

logger = logging.getLogger(__name__)

GKE_TPU_ACCELERATOR_TYPE_ENV_VAR = "TPU_ACCELERATOR_TYPE"
GKE_TPU_TOPOLOGY_ENV_VAR = "TPU_TOPOLOGY"
GKE_TPU_WORKER_ID_ENV_VAR = "TPU_WORKER_ID"
GKE_TPU_NAME_ENV_VAR = "TPU_NAME"
TPU_VISIBLE_CHIPS_ENV_VAR = "TPU_VISIBLE_CHIPS"
GCE_TPU_ACCELERATOR_ENDPOINT = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
GCE_TPU_HEADERS = {"Metadata-Flavor": "Google"}
GCE_TPU_ACCELERATOR_KEY = "accelerator-type"
GCE_TPU_ENV_KEY = "tpu-env"
GCE_TPU_INSTANCE_ID_KEY = "instance-id"
GCE_TPU_WORKER_ID_KEY = "agent-worker-number"
TPU_PCI_VENDOR_ID = "0x1ae0"

# The ray.io/ spelling of the node labels these facts become (Ray's RAY_NODE_*_KEY).
SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
TOPOLOGY_LABEL = "ray.io/tpu-topology"
POD_TYPE_LABEL = "ray.io/tpu-pod-type"

_node_lock = threading.Lock()
_node_cache = {}  # node id -> (labels, TPU chips) of this process's node


def _connected_node():
    """(labels, TPU chips) of the torus node this process runs on, or None when it is not connected (no cluster is
    started for the asking) or its node is not listed."""
    from torus._private import state as _st
    state = _st.current()
    if state is None:
        return None
    node_id = state.node_id or os.environ.get("TORUS_NODE_ID", "")
    if not node_id:
        return None
    with _node_lock:
        if node_id in _node_cache:
            return _node_cache[node_id]
    try:
        state.core.refresh_nodes()
        listed = {n[0]: n for n in state.core.nodes()}
    except RuntimeError as e:
        logger.debug("Could not list the cluster's nodes: %s", e)
        return None
    if node_id not in listed:
        return None
    _, _, total, labels = listed[node_id]
    found = (dict(labels), int(total.get("TPU", 0) // 10000))
    with _node_lock:
        _node_cache[node_id] = found
    return found


def _get_tpu_metadata(key):
    """A GCE metadata attribute of this VM, or None (no metadata server, an error, an empty answer, or
    TPU_SKIP_MDS_QUERY=true as GKE sets it)."""
    if os.environ.get("TPU_SKIP_MDS_QUERY", "").lower() == "true":
        return None
    request = urllib.request.Request(GCE_TPU_ACCELERATOR_ENDPOINT + key, headers=GCE_TPU_HEADERS)
    try:
        with urllib.request.urlopen(request, timeout=1) as answer:
            text = answer.read().decode(errors="replace")
            return text if answer.status == 200 and text else None
    except (OSError, ValueError) as e:
        logger.debug("Unable to poll the TPU GCE Metadata: %s", e)
        return None


def _fact(env_var, label, metadata_key):
    """The first of: the environment variable, this node's label (when connected), the metadata attribute."""
    value = os.environ.get(env_var)
    if value:
        return value
    node = _connected_node()
    if node is not None:
        return node[0].get(f"torus.io/{label}") or None
    return _get_tpu_metadata(metadata_key)


def _count_device_chips(root="/"):
    """Chips in this machine's device files: /dev/accelN character devices (a /dev/accel directory is NVIDIA's),
    else /dev/vfio groups whose PCI vendor is Google's, counted once per PCI slot (a TPU7x chip has two groups)."""
    accel = [p for p in glob.glob(os.path.join(root, "dev", "accel*")) if not os.path.isdir(p)]
    if accel:
        return len(accel)
    try:
        groups = [g for g in os.listdir(os.path.join(root, "dev", "vfio")) if g.isdigit()]
    except OSError:
        return 0
    slots = set()
    for group in groups:
        devices = os.path.join(root, "sys", "kernel", "iommu_groups", group, "devices")
        try:
            names = os.listdir(devices)
        except OSError:
            continue
        for device in names:
            try:
                with open(os.path.join(devices, device, "vendor"), encoding="ascii") as f:
                    vendor = f.read().strip().lower()
            except (OSError, UnicodeDecodeError):
                continue
            if vendor == TPU_PCI_VENDOR_ID:
                slots.add(device.rsplit(".", 1)[0])  # domain:bus:device, without the function
    return len(slots)


class TPUAcceleratorManager:
    """Google TPU chips of the current host and process (Ray's TPUAcceleratorManager, read-only: torus's agent
    sets a worker's device variables, not the worker itself)."""

    @staticmethod
    def get_resource_name():
        return "TPU"

    @staticmethod
    def get_visible_accelerator_ids_env_var():
        return TPU_VISIBLE_CHIPS_ENV_VAR

    @staticmethod
    def get_current_process_visible_accelerator_ids():
        """The chips TPU_VISIBLE_CHIPS names (as strings), [] when it is empty, None when it is unset (the process
        may use every chip of its host)."""
        visible = os.environ.get(TPU_VISIBLE_CHIPS_ENV_VAR)
        if visible is None:
            return None
        if visible == "":
            return []
        per_chip = _shapes.get_tpu_resource_per_chip()
        if per_chip == 1:
            return visible.split(",")
        return [str(int(chip) * per_chip + d) for chip in visible.split(",") if chip.strip() for d in range(per_chip)]

    @staticmethod
    def get_current_node_num_accelerators():
        """The chips of this host: its torus node's TPU resource when connected, else its device files; 0 when it
        has none."""
        node = _connected_node()
        if node is not None:
            return node[1]
        return _count_device_chips()

    @staticmethod
    def is_valid_tpu_accelerator_type(tpu_accelerator_type):
        return _shapes.is_valid_tpu_accelerator_type(tpu_accelerator_type)

    @staticmethod
    def is_valid_tpu_accelerator_topology(tpu_accelerator_version, tpu_topology):
        return _shapes.is_valid_tpu_accelerator_topology(tpu_accelerator_version, tpu_topology)

    @staticmethod
    def validate_resource_request_quantity(quantity):
        """(ok, message) for a task's TPU amount: 1, 2, 4 or 8 chips, in Ray's words."""
        if quantity not in _shapes.TPU_VALID_CHIP_OPTIONS:
            return (False, f"The number of requested 'TPU' was set to {quantity} which is not a supported chip "
                           f"configuration. Supported configs: {_shapes.TPU_VALID_CHIP_OPTIONS}")
        return (True, None)

    @staticmethod
    def get_current_node_tpu_pod_type():
        """This host's pod type, normalised ("v6e-16", "v7x-8"), or None."""
        pod_type = _fact(GKE_TPU_ACCELERATOR_TYPE_ENV_VAR, "tpu-pod-type", GCE_TPU_ACCELERATOR_KEY)
        if pod_type and _shapes.is_valid_tpu_accelerator_type(pod_type):
            return _shapes.normalize_tpu_accelerator_type(pod_type)
        return None

    @staticmethod
    def get_current_node_tpu_name():
        """The name of the slice this host belongs to, or None."""
        return _fact(GKE_TPU_NAME_ENV_VAR, "tpu-slice-name", GCE_TPU_INSTANCE_ID_KEY)

    @staticmethod
    def get_current_node_tpu_worker_id():
        """This host's index in its slice, or None."""
        worker_id = _fact(GKE_TPU_WORKER_ID_ENV_VAR, "tpu-worker-id", GCE_TPU_WORKER_ID_KEY)
        try:
            return int(worker_id) if worker_id else None
        except ValueError:
            return None

    @staticmethod
    def get_current_node_tpu_topology():
        """This host's slice topology, lower-case ("4x4"), or None."""
        topology = os.environ.get(GKE_TPU_TOPOLOGY_ENV_VAR)
        if topology:
            return topology.strip().lower()
        node = _connected_node()
        if node is not None:
            return node[0].get("torus.io/tpu-topology") or None
        tpu_env = _get_tpu_metadata(GCE_TPU_ENV_KEY)
        found = re.search(r"TOPOLOGY:\s*'([^']+)'", tpu_env) if tpu_env else None
        return found.group(1).strip().lower() if found else None

    @staticmethod
    def get_num_workers_in_current_tpu_pod():
        """Hosts in this host's slice: the pod type's cores over the cores of this host (a part host counts as
        one); None off a TPU host."""
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        if not pod_type:
            # Ray 2.60 raises AttributeError here (it reads the cores of a None pod type); torus answers as Ray's
            # ray.util.tpu.get_current_pod_worker_count documents.
            return None
        cores_per_host = (TPUAcceleratorManager.get_current_node_num_accelerators() *
                          _shapes.get_tpu_cores_per_chip(pod_type))
        if cores_per_host <= 0:
            return None
        cores = int(pod_type.split("-")[1])
        return cores // cores_per_host + (1 if cores % cores_per_host else 0)

    @staticmethod
    def get_current_node_accelerator_type():
        """"TPU-V6E" and the like for this host, or None."""
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        if pod_type is None:
            return None
        return "TPU-" + _shapes.normalize_tpu_accelerator_type(pod_type).split("-")[0].upper()

    @staticmethod
    def get_current_node_accelerator_labels():
        """The ray.io/tpu-* labels of this host (those known)."""
        labels = {}
        name = TPUAcceleratorManager.get_current_node_tpu_name()
        if name:
            labels[SLICE_NAME_LABEL] = name
        worker_id = TPUAcceleratorManager.get_current_node_tpu_worker_id()
        if worker_id is not None:
            labels[WORKER_ID_LABEL] = str(worker_id)
        topology = TPUAcceleratorManager.get_current_node_tpu_topology()
        if topology:
            labels[TOPOLOGY_LABEL] = topology
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        if pod_type:
            labels[POD_TYPE_LABEL] = pod_type
        return labels
