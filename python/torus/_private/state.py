"""The process's connection to a torus cluster, at the bottom of the package: the compiled core worker (module
_torus_core) and what this process knows of its cluster. Everything else reads `current()`; only worker.py sets it.

Thread-safety: `lock` guards the setting of the connection; a State is read without it.
"""

import contextvars
import os
import sys
import threading

lock = threading.RLock()
# (task id, name, resources) of the task or actor call running in this thread or coroutine.
current_task = contextvars.ContextVar("torus_current_task", default=None)
_current = None  # the State of this process once connected


def import_core():
    """The compiled core (_torus_core): on sys.path after setup, else beside a source tree's build."""
    try:
        import _torus_core
        return _torus_core
    except ImportError:
        pass
    # Beside a source tree: python/torus/_private/../../../build/python.
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(here))), "build", "python")
    if os.path.isdir(candidate) and candidate not in sys.path:
        sys.path.append(candidate)
    import _torus_core
    return _torus_core


class State:
    """One connection: the core worker and the cluster's coordinates as this process sees them."""

    def __init__(self, core, job_id, node_id, head_address, token, local_cluster=None, is_worker=False):
        self.core = core
        self.job_id = job_id
        self.node_id = node_id
        self.head_address = head_address
        self.token = token
        self.local_cluster = local_cluster  # the LocalCluster this process started, if any
        self.is_worker = is_worker
        self.actor_id = None  # in an actor's worker
        self.actor_resources = {}  # in an actor's worker: what it holds
        self.printer = None   # (thread, stop event) printing the workers' output
        self.http_address = None  # the head's HTTP API, once asked for (worker.http_address())
        self.session_dir = None   # the session of the local cluster this process started
        self.job_runtime_env = {}  # init(runtime_env=...): the default of this program's tasks and actors
        # Where actor names are looked up and registered: init(namespace=...), else the driver's (its workers get
        # it as TORUS_NAMESPACE), else one of this job's own (as Ray's anonymous namespace).
        self.namespace = os.environ.get("TORUS_NAMESPACE") or f"anonymous-{job_id}"


def current():
    """This process's State, or None before init (and after shutdown)."""
    return _current


def set_current(state):
    global _current
    _current = state
