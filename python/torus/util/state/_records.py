"""The head's views (docs/rest.md) as Ray's state records (dicts with every column of the record's schema).

Names: the head names a task `module.qualname` (a function) or `module.Class.method` (an actor call) unless the
program gave it a name, and an actor class `module.Class`. Ray names them `f`, `Class.method` and `Class`; the module
part is dropped here when it names a module loaded in this process (as it is in the program that defined the function:
`__main__` for a script), so a name given with `.options(name=...)` is kept as it is (unless its first part happens
to name a loaded module).

What the head does not know is None: an actor's runtime env, call site and placement group; a task's parent, worker
id, resources and placement group; a placement group's creator job and lifetime.
"""

import datetime
import sys

from torus._private.worker import _with_ray_labels
from torus.util import _group_views

# The head's task states in Ray's words. A PENDING task waits for its arguments or a worker; the head does not say
# which, so it reads as Ray's state for a task waiting to be scheduled.
_TASK_STATES = {"PENDING": "PENDING_NODE_ASSIGNMENT", "RUNNING": "RUNNING", "FINISHED": "FINISHED",
                "FAILED": "FAILED"}

# A failed task's error, as the core words it, to Ray's ErrorType names (first match wins).
_ERROR_TYPES = (("it raised an exception", "TASK_EXECUTION_EXCEPTION"),
                ("cancel", "TASK_CANCELLED"),
                ("the actor's worker died", "ACTOR_DIED"),
                ("the actor is dead", "ACTOR_DIED"),
                ("placement group", "TASK_PLACEMENT_GROUP_REMOVED"),
                ("no node can", "TASK_UNSCHEDULABLE_ERROR"),
                ("no node could", "TASK_UNSCHEDULABLE_ERROR"),
                ("the worker running task", "WORKER_DIED"),
                ("could not lease a worker", "WORKER_DIED"),
                ("its owner", "OWNER_DIED"),
                ("the process that submitted this task", "OWNER_DIED"))


def ray_name(name, keep=1):
    """`name` without its module (the longest leading part that names a loaded module), then its last `keep`
    parts; `name` as it is when no module leads it."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in sys.modules:
            return ".".join(parts[i:][-keep:])
    return name


def _or_none(value):
    return value if value not in ("", 0, None) else None


def error_type(error):
    for words, kind in _ERROR_TYPES:
        if words in error:
            return kind
    return None


def node(view, head_host, died_ms=None):
    alive = view["state"] == "ALIVE"
    return {"node_id": view["node_id"], "node_ip": view["address"],
            "is_head_node": view["address"] == head_host,
            "state": view["state"], "state_message": view.get("death_reason") or None,
            "node_name": view["address"],
            "resources_total": {k: float(v) for k, v in view.get("resources_total", {}).items()},
            "labels": _with_ray_labels(view.get("labels", {})),
            "start_time_ms": view.get("start_time_ms") or None,
            "end_time_ms": 0 if alive else died_ms}


def actor(view):
    cause = view.get("death_cause")
    return {"actor_id": view["actor_id"], "class_name": ray_name(view["class_name"]), "state": view["state"],
            "job_id": view["job_id"], "name": view.get("name", ""), "node_id": view.get("node_id") or None,
            "pid": _or_none(view.get("pid")), "ray_namespace": view.get("namespace"),
            "serialized_runtime_env": None,
            "required_resources": dict(view.get("resources", {})),
            "death_cause": {"actor_died_error_context": {"error_message": cause}} if cause else None,
            "is_detached": view.get("is_detached"), "placement_group_id": None, "repr_name": "",
            "num_restarts": view.get("restarts", 0), "num_restarts_due_to_lineage_reconstruction": 0,
            "num_restarts_due_to_node_preemption": 0, "call_site": None, "label_selector": None,
            "fallback_strategy": None}


def _events(pairs):
    return [{"state": state, "created_ms": float(ms)} for state, ms in pairs if state and ms]


def _task(task_id, attempt, name, func, state, job_id, actor_id, kind, node_id, pid, error, times):
    submitted, started, ended = times
    return {"task_id": task_id, "attempt_number": attempt, "name": name, "state": state, "job_id": job_id,
            "actor_id": actor_id, "type": kind, "func_or_class_name": func, "parent_task_id": None,
            "node_id": node_id, "worker_id": None, "worker_pid": pid,
            "error_type": error_type(error) if state == "FAILED" else None,
            "language": "PYTHON", "required_resources": None, "runtime_env_info": None, "placement_group_id": None,
            "events": _events([("PENDING_ARGS_AVAIL", submitted), ("RUNNING", started),
                               (state if state in ("FINISHED", "FAILED") else None, ended)]),
            "profiling_data": None, "creation_time_ms": _or_none(submitted), "start_time_ms": _or_none(started),
            "end_time_ms": _or_none(ended), "task_log_info": None,
            "error_message": error if state == "FAILED" and error else None, "is_debugger_paused": None,
            "call_site": None, "label_selector": None, "fallback_strategy": None}


def task(view, actors):
    """A task or actor call; an actor call's node and pid are its actor's when the caller did not see them."""
    actor_id = view.get("actor_id") or None
    owner = actors.get(actor_id, {}) if actor_id else {}
    name = ray_name(view["name"], keep=2 if actor_id else 1)
    return _task(view["task_id"], view.get("attempt", 0), name, name, _TASK_STATES.get(view["state"], view["state"]),
                 view["job_id"], actor_id, "ACTOR_TASK" if actor_id else "NORMAL_TASK",
                 view.get("node_id") or owner.get("node_id") or None,
                 _or_none(view.get("pid")) or _or_none(owner.get("pid")),
                 view.get("error", ""),
                 (view.get("submit_time_ms"), view.get("start_time_ms"), view.get("end_time_ms")))


def creation_task(view):
    """An actor's creation as Ray lists it (ACTOR_CREATION_TASK), made from the head's actor: FINISHED once the
    actor started, FAILED when it died before that, else waiting. Its task id is the actor's id."""
    cls = ray_name(view["class_name"])
    name = f"{view['name']}:{cls}.__init__" if view.get("name") else f"{cls}.__init__"
    started = view.get("start_time_ms") or 0
    if started:
        state = "FINISHED"
    elif view["state"] == "DEAD":
        state = "FAILED"
    else:
        state = "PENDING_NODE_ASSIGNMENT"
    return _task(view["actor_id"], view.get("restarts", 0), name, name, state, view["job_id"], view["actor_id"],
                 "ACTOR_CREATION_TASK", view.get("node_id") or None, _or_none(view.get("pid")),
                 "the actor is dead: " + view.get("death_cause", "") if state == "FAILED" else "",
                 (view.get("create_time_ms"), 0, started or (view.get("end_time_ms") if state == "FAILED" else 0)))


def placement_group(view):
    row = _group_views.row_of(view)
    group_id = row["placement_group_id"]
    bundles = [{"bundle_id": {"placement_group_id": group_id, "bundle_index": i}, "unit_resources": resources,
                "node_id": row["bundles_to_node_id"].get(i) or None, "label_selector": {}}
               for i, resources in row["bundles"].items()]
    stats = dict(row["stats"])
    return {"placement_group_id": group_id, "name": row["name"], "creator_job_id": None, "state": row["state"],
            "bundles": bundles, "is_detached": None, "stats": stats, "topology_strategy": None,
            "topology_assignments": None}


_SOURCE_TYPES = {"node": "GCS", "group": "GCS", "actor": "GCS", "package": "GCS", "job": "JOBS", "run": "JOBS",
                 "worker": "RAYLET", "service": "SERVE"}


def _severity(e):
    exit_ = e.get("exit")
    failed_exit = exit_ is not None and (exit_.get("lost") or exit_.get("start_failed") or exit_.get("signal")
                                         or exit_.get("exit_code", 0) != 0)
    if e["type"] == "NodeDied" or failed_exit or e.get("status") == "FAILED":
        return "ERROR"
    if e["type"] in ("GroupWaiting", "GroupBundlesLost") or e.get("status") in ("RESTARTING", "RESCHEDULING"):
        return "WARNING"
    return "INFO"


def cluster_event(e, epoch):
    text = f"{e['type']}: {e['kind']} {e['id']}"
    if e.get("status"):
        text += f" is {e['status']}"
    if e.get("message"):
        text += f": {e['message']}"
    time_ms = e.get("time_ms", 0)
    return {"severity": _severity(e), "time": str(datetime.datetime.fromtimestamp(time_ms // 1000)),
            "source_type": _SOURCE_TYPES.get(e["kind"], "GCS"), "message": text,
            "event_id": f"{epoch}-{e['revision']}", "custom_fields": dict(e), "_time_ms": time_ms}
