"""The state API's functions (as ray.util.state.api), each a StateApiClient query with Ray's signature:

    list_actors(address=None, filters=None, limit=100, timeout=30, detail=False, raise_on_missing_output=True)
    get_actor(id, address=None, timeout=30)                     # None when there is no such actor
    summarize_tasks(address=None, timeout=30, raise_on_missing_output=True)

Filters are (column, "=" or "!=", value) on the record's filterable columns (common.py); results are sorted by id.
`address` None is the cluster this process is connected to (else as StateApiClient resolves it). The logs
(list_logs, get_log) are in _logs.py.
"""

from typing import Dict, List, Optional, Tuple, Union

from torus.util.state._client import StateApiClient, refuse_unserved
from torus.util.state.common import (DEFAULT_LIMIT, DEFAULT_RPC_TIMEOUT, ActorState, GetApiOptions, JobState,
                                     ListApiOptions, NodeState, ObjectState, PlacementGroupState, PredicateType,
                                     RuntimeEnvState, StateResource, SummaryApiOptions, SummaryResource,
                                     SupportedFilterType, TaskState, WorkerState)

_Filters = Optional[List[Tuple[str, PredicateType, SupportedFilterType]]]


def _get(resource, id, address, timeout, _explain):
    refuse_unserved(resource)
    return StateApiClient(address=address).get(resource, id, GetApiOptions(timeout=timeout), _explain=_explain)


def _list(resource, address, filters, limit, timeout, detail, raise_on_missing_output, _explain):
    refuse_unserved(resource)
    return StateApiClient(address=address).list(
        resource, options=ListApiOptions(limit=limit, timeout=timeout, filters=filters, detail=detail),
        raise_on_missing_output=raise_on_missing_output, _explain=_explain)


def _summary(resource, address, timeout, raise_on_missing_output, _explain):
    refuse_unserved(StateResource(resource.value))
    return StateApiClient(address=address).summary(resource, options=SummaryApiOptions(timeout=timeout),
                                                   raise_on_missing_output=raise_on_missing_output,
                                                   _explain=_explain)


def get_actor(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
              _explain: bool = False) -> Optional[ActorState]:
    """The actor with this id (hex), with its detail columns, or None."""
    return _get(StateResource.ACTORS, id, address, timeout, _explain)


def get_job(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
            _explain: bool = False) -> Optional[JobState]:
    """The submitted job with this submission id, or None."""
    return _get(StateResource.JOBS, id, address, timeout, _explain)


def get_placement_group(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                        _explain: bool = False) -> Optional[PlacementGroupState]:
    """The placement group whose id is `id` (its hex spelling, as `pg.id.hex()` gives it), or None."""
    return _get(StateResource.PLACEMENT_GROUPS, id, address, timeout, _explain)


def get_node(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> Optional[NodeState]:
    """The node with this id, or None."""
    return _get(StateResource.NODES, id, address, timeout, _explain)


def get_worker(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
               _explain: bool = False) -> Optional[WorkerState]:
    """Not available in torus (no table of workers): raises NotImplementedError."""
    return _get(StateResource.WORKERS, id, address, timeout, _explain)


def get_task(id: Union[str, "ObjectRef"], address: Optional[str] = None,  # noqa: F821 - as Ray spells it
             timeout: int = DEFAULT_RPC_TIMEOUT, _explain: bool = False) -> Optional[TaskState]:
    """The task with this id (or the task that returns this ObjectRef), or None. An actor's creation has the
    actor's id."""
    str_id = id if isinstance(id, str) else id.task_id().hex()
    return _get(StateResource.TASKS, str_id, address, timeout, _explain)


def get_objects(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                _explain: bool = False) -> List[ObjectState]:
    """Not available in torus (objects are known only to their owners): raises NotImplementedError."""
    return _get(StateResource.OBJECTS, id, address, timeout, _explain)


def list_actors(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                _explain: bool = False) -> List[ActorState]:
    """The actors the head knows (the dead ones among the newest 1,000)."""
    return _list(StateResource.ACTORS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_placement_groups(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                          timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False,
                          raise_on_missing_output: bool = True, _explain: bool = False) -> List[PlacementGroupState]:
    """Every placement group and slice group, removed ones included."""
    return _list(StateResource.PLACEMENT_GROUPS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def list_nodes(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> List[NodeState]:
    """Every node, dead ones included."""
    return _list(StateResource.NODES, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_jobs(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
              timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
              _explain: bool = False) -> List[JobState]:
    """The jobs submitted through the Jobs API (drivers started by hand are not jobs of the head)."""
    return _list(StateResource.JOBS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_workers(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> List[WorkerState]:
    """Not available in torus (no table of workers): raises NotImplementedError."""
    return _list(StateResource.WORKERS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_tasks(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> List[TaskState]:
    """Tasks, actor calls and actor creations (the head keeps the newest 10,000 tasks; more raise unless
    raise_on_missing_output=False)."""
    return _list(StateResource.TASKS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_objects(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> List[ObjectState]:
    """Not available in torus (objects are known only to their owners): raises NotImplementedError."""
    return _list(StateResource.OBJECTS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_runtime_envs(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                      timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                      _explain: bool = False) -> List[RuntimeEnvState]:
    """Not available in torus (no runtime environments are built): raises NotImplementedError."""
    return _list(StateResource.RUNTIME_ENVS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def list_cluster_events(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                        timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False,
                        raise_on_missing_output: bool = True, _explain: bool = False) -> List[Dict]:
    """The head's events (nodes, groups, jobs, workers, actors, ...), oldest first, as Ray's cluster events."""
    return _list(StateResource.CLUSTER_EVENTS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def summarize_tasks(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    """{"cluster": {"summary": {name: {...}}, "total_tasks", "total_actor_tasks", "total_actor_scheduled", ...}}."""
    return _summary(SummaryResource.TASKS, address, timeout, raise_on_missing_output, _explain)


def summarize_actors(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    """{"cluster": {"summary": {class: {"class_name", "state_counts"}}, "total_actors", "summary_by": "class"}}."""
    return _summary(SummaryResource.ACTORS, address, timeout, raise_on_missing_output, _explain)


def summarize_objects(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                      raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    """Not available in torus (objects are known only to their owners): raises NotImplementedError."""
    return _summary(SummaryResource.OBJECTS, address, timeout, raise_on_missing_output, _explain)
