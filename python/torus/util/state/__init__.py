"""The cluster's state as Ray's state API has it (as ray.util.state): list, get and summarize actors, tasks, nodes,
placement groups, jobs and cluster events, and read log files, from the head's HTTP API.

    from torus.util.state import list_actors, list_tasks, summarize_tasks
    list_actors(filters=[("state", "=", "ALIVE")])             # [ActorState(actor_id=..., class_name="A", ...)]
    list_tasks(filters=[("name", "=", "step"), ("state", "!=", "FINISHED")], limit=1000, detail=True)
    summarize_tasks()["cluster"]["summary"]["step"]["state_counts"]   # {"FINISHED": 120, "RUNNING": 2}

Records: common.py; the queries: api.py and _client.py (StateApiClient); logs: _logs.py. Workers, objects and
runtime environments are not kept by torus: their functions raise NotImplementedError saying so.
"""

from torus.util.state._client import StateApiClient
from torus.util.state._logs import get_log, list_logs
from torus.util.state.api import (get_actor, get_job, get_node, get_objects, get_placement_group, get_task,
                                  get_worker, list_actors, list_cluster_events, list_jobs, list_nodes, list_objects,
                                  list_placement_groups, list_runtime_envs, list_tasks, list_workers,
                                  summarize_actors, summarize_objects, summarize_tasks)

__all__ = ["get_actor", "get_log", "get_node", "get_objects", "get_placement_group", "get_task", "get_worker",
           "get_job", "list_actors", "list_jobs", "list_nodes", "list_placement_groups", "list_tasks", "list_workers",
           "list_objects", "list_runtime_envs", "list_logs", "list_cluster_events", "summarize_actors",
           "summarize_objects", "summarize_tasks", "StateApiClient"]
