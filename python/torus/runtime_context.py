"""torus.get_runtime_context() (as ray.runtime_context): where and as what the calling code runs.

    ctx = torus.get_runtime_context()
    ctx.get_job_id(), ctx.get_node_id()          # in a driver, a task or an actor
    ctx.get_task_id(), ctx.get_actor_id()        # hex; None where there is none (a driver: a warning too)
    ctx.get_placement_group_id()                 # hex of the group the task or actor runs in, or None

Ids torus keeps as bytes (tasks, actors, placement groups) are given in hex, as Ray gives them; ids torus keeps as
strings are given as they are, so that they match torus's listings and options: jobs ("driver-3f2a..." or a submitted
job's id), nodes (16 hex digits), workers ("task-..." in a worker; a driver's is its job id). Reads the connection at
each call: a context taken before init() works after it.
"""

import json
import logging
import os
import sys

from torus._private import state as _st

logger = logging.getLogger(__name__)

# Ray's accelerator resource names: those torus assigns (GPU, TPU) list the worker's devices, the others are empty.
_ACCELERATORS = ("FURIOSA", "GPU", "HPU", "MBLT", "NPU", "RBLN", "TPU", "TTNPU", "neuron_cores")
_DEVICE_ENV = {"GPU": "CUDA_VISIBLE_DEVICES", "TPU": "TPU_VISIBLE_CHIPS"}
WORKER_MODE, SCRIPT_MODE = 1, 0  # Ray's values of worker.mode


class _ID:
    """An id of the deprecated properties (job_id, node_id, ...): hex() and binary() as Ray's ids."""

    def __init__(self, binary):
        self._binary = binary

    def binary(self):
        return self._binary

    def hex(self):
        return self._binary.hex()

    def is_nil(self):
        return not self._binary

    def __eq__(self, other):
        return isinstance(other, _ID) and other._binary == self._binary

    def __hash__(self):
        return hash(self._binary)

    def __repr__(self):
        return f"ID({self.hex()})"


def _ray_task_name(name):
    """Ray's task name of torus's: the function's qualified name without its module ("f", "Actor.m"); a name given
    with .options(name=...) as it is."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in sys.modules:
            return ".".join(parts[i:])
    return name


class RuntimeContext:
    """What get_runtime_context() returns. Not thread-safe to share across init()/shutdown()."""

    def __init__(self, worker=None):
        self.worker = worker

    # --- the connection ---

    def _state(self):
        return _st.current()

    def _connected(self, what):
        state = _st.current()
        if state is None:
            raise RuntimeError(f"{what} is not available because Ray has not been initialized.")
        return state

    def _mode(self):
        state = _st.current()
        return WORKER_MODE if state is not None and state.is_worker else SCRIPT_MODE

    def _worker_only(self, log=logger.warning):
        if self._mode() != WORKER_MODE:
            log(f"This method is only available when the process is a worker. Current mode: {self._mode()}")
            return False
        return True

    @property
    def worker_mode(self):
        """torus: "WORKER" in a task or actor, "DRIVER" elsewhere."""
        return "WORKER" if self._mode() == WORKER_MODE else "DRIVER"

    # --- ids ---

    def get_job_id(self):
        return self._connected("Job ID").job_id

    def get_node_id(self):
        return self._connected("Node ID").node_id

    def get_worker_id(self):
        state = self._connected("Worker ID")
        return os.environ.get("TORUS_WORKER_ID", "") if state.is_worker else state.job_id

    def get_task_id(self):
        if not self._worker_only():
            return None
        current = _st.current_task.get()
        return current[0].hex() if current else None

    def get_task_name(self):
        if not self._worker_only():
            return None
        current = _st.current_task.get()
        return _ray_task_name(current[1]) if current else None

    def get_task_function_name(self):
        """The running function's (or actor method's) module-qualified name. A task given a name with
        .options(name=...) reports that name (torus's task records keep only it)."""
        if not self._worker_only():
            return None
        current = _st.current_task.get()
        return current[1] if current else None

    def get_actor_id(self):
        if not self._worker_only(logger.debug):
            return None
        actor_id = self._state().actor_id
        return actor_id.hex() if actor_id else None

    def _actor_record(self):
        from torus.util.state import _head
        return _head.actor_view(self._state().actor_id.hex())

    def get_actor_name(self):
        """The actor's name ("" when it has none); None outside an actor."""
        if not self._worker_only():
            return None
        if not self._state().actor_id:
            return None
        record = self._actor_record()
        return record["name"] if record else ""

    @property
    def namespace(self):
        state = self._state()
        return state.namespace if state is not None else None

    @property
    def was_current_actor_reconstructed(self):
        state = self._state()
        assert state is not None and state.actor_id, "This method should't be called inside Ray tasks."
        record = self._actor_record()
        return bool(record) and record["restarts"] != 0

    @property
    def current_actor(self):
        """A handle on the running actor itself."""
        state = self._connected("The current actor")
        if not state.actor_id:
            raise RuntimeError("This method is only available in an actor.")
        from torus.actor import ActorHandle
        record = self._actor_record()
        if record is None:
            raise RuntimeError(f"actor {state.actor_id.hex()} is not in the head's actor directory")
        return ActorHandle(state.actor_id, record["owner_address"], record["class_name"],
                           {m: {} for m in record["methods"]}, record["max_task_retries"])

    # --- placement groups ---

    def get_placement_group_id(self):
        """Hex of the placement group the running task or actor is in; None elsewhere."""
        from torus.util.placement_group import get_current_placement_group
        if self._state() is None:
            return None
        pg = get_current_placement_group()
        return pg.id.hex() if pg is not None else None

    @property
    def current_placement_group_id(self):
        from torus.util.placement_group import PlacementGroupID, get_current_placement_group
        pg = get_current_placement_group() if self._state() is not None else None
        return pg.id if pg is not None else PlacementGroupID.nil()

    @property
    def should_capture_child_tasks_in_placement_group(self):
        from torus.util.placement_group import current_capture
        return current_capture()

    # --- resources and environment ---

    def get_assigned_resources(self):
        """What this worker holds for the running code: an actor's resources in an actor (its methods included),
        the task's in a task ({"CPU": 1.0}); AssertionError in a driver, as Ray."""
        assert self._mode() == WORKER_MODE, (f"This method is only available when the process is a worker. "
                                             f"Current mode: {self._mode()}")
        state = self._state()
        if state.actor_id:
            return {k: float(v) for k, v in state.actor_resources.items()}
        current = _st.current_task.get()
        return {k: float(v) for k, v in (current[2] if current and len(current) > 2 else {}).items()}

    def get_accelerator_ids(self):
        """The devices this worker holds, by Ray's accelerator names: {"GPU": ["0"], "TPU": ["0", "1"], ...} (from
        CUDA_VISIBLE_DEVICES and TPU_VISIBLE_CHIPS, which the agent sets); [] for the others."""
        self._connected("Accelerator IDs")
        out = {}
        for name in _ACCELERATORS:
            value = os.environ.get(_DEVICE_ENV[name], "") if name in _DEVICE_ENV else ""
            out[name] = [x for x in value.split(",") if x != ""]
        return out

    def get_resource_ids(self):
        return self.get_accelerator_ids()

    def get_runtime_env_string(self):
        """The runtime_env of the running task or actor (its job's, with its own over it), as JSON; "{}" for none."""
        state = self._state()
        if state is not None and state.is_worker:
            return os.environ.get("TORUS_RUNTIME_ENV", "{}")
        return json.dumps(state.job_runtime_env if state is not None else {})

    @property
    def runtime_env(self):
        """get_runtime_env_string() as a dict."""
        return json.loads(self.get_runtime_env_string())

    def get_node_labels(self):
        """The labels of this process's node ({"torus.io/node-id": ..., ...})."""
        state = self._connected("Node labels")
        state.core.refresh_nodes()
        for node_id, _, _, labels in state.core.nodes():
            if node_id == state.node_id:
                return dict(labels)
        return {}

    @property
    def gcs_address(self):
        """The head's address (host:port)."""
        return self._connected("The head's address").head_address

    def get_temp_dir(self):
        assert self._state() is not None, \
            "Temp directory is not available because Ray has not been initialized."
        return os.environ.get("TORUS_TEMP_DIR", "/tmp/torus")

    # --- deprecated forms ---

    def get(self):
        context = {"job_id": self.job_id, "node_id": self.node_id, "namespace": self.namespace}
        if self._mode() == WORKER_MODE:
            if self.task_id is not None:
                context["task_id"] = self.task_id
            if self.actor_id is not None:
                context["actor_id"] = self.actor_id
        return context

    @property
    def job_id(self):
        return _ID(self.get_job_id().encode())

    @property
    def node_id(self):
        return _ID(self.get_node_id().encode())

    @property
    def task_id(self):
        assert self._mode() == WORKER_MODE, (f"This method is only available when the process is a worker. "
                                             f"Current mode: {self._mode()}")
        current = _st.current_task.get()
        return _ID(current[0]) if current else None

    @property
    def actor_id(self):
        assert self._mode() == WORKER_MODE, (f"This method is only available when the process is a worker. "
                                             f"Current mode: {self._mode()}")
        actor_id = self._state().actor_id
        return _ID(actor_id) if actor_id else None


_runtime_context = RuntimeContext()


def get_runtime_context():
    """The RuntimeContext of this driver, task or actor (it does not connect: get_job_id() raises before init())."""
    return _runtime_context
