"""torus.get_runtime_context(): where and as what this code runs."""

import os

from torus._private import state as _st
from torus._private import worker as _worker


class RuntimeContext:
    def __init__(self, state):
        self._state = state

    def get_job_id(self):
        return self._state.job_id

    def get_node_id(self):
        return self._state.node_id

    def get_task_id(self):
        current = _st.current_task.get()
        return current[0].hex() if current else None

    def get_task_name(self):
        current = _st.current_task.get()
        return current[1] if current else None

    def get_worker_id(self):
        return os.environ.get("TORUS_WORKER_ID")

    def get_actor_id(self):
        aid = self._state.actor_id
        return aid.hex() if aid else None

    @property
    def worker_mode(self):
        return "WORKER" if self._state.is_worker else "DRIVER"

    def get_assigned_resources(self):
        """What this worker holds for the running code: an actor's resources in an actor (its methods included),
        the task's in a task ({"CPU": 1.0, "TPU": 4.0}); {} in a driver."""
        if self._state.actor_id:
            return dict(self._state.actor_resources)
        current = _st.current_task.get()
        return dict(current[2]) if current and len(current) > 2 else {}

    def get_accelerator_ids(self):
        """The devices this worker holds: {"TPU": ["0", "1"], "GPU": [...]} (as TPU_VISIBLE_CHIPS and
        CUDA_VISIBLE_DEVICES give them)."""
        def split(name):
            v = os.environ.get(name, "")
            return [x for x in v.split(",") if x != ""]
        return {"TPU": split("TPU_VISIBLE_CHIPS"), "GPU": split("CUDA_VISIBLE_DEVICES")}


def get_runtime_context():
    return RuntimeContext(_worker.state_or_init())
