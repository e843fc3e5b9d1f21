"""The state API's records and options (as ray.util.state.common): one dataclass per resource with Ray's fields in
Ray's order, each field marked filterable (usable in `filters`) and/or detail (filled only with `detail=True`, None
otherwise); the options of a list, get and summary query.

Records read as objects and as dicts: `a.state`, `a["state"]`, `a.get("state")`, `a.asdict()`.

Thread-safety: records and options are plain values.
"""

import dataclasses
import enum
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple, Union

from torus.job_submission._models import JobDetails

DEFAULT_RPC_TIMEOUT = 30
DEFAULT_LIMIT = 100
DEFAULT_LOG_LIMIT = 1000
# The most entries one query returns, as Ray's API server caps them.
RAY_MAX_LIMIT_FROM_API_SERVER = 10_000

SupportedFilterType = Union[str, bool, int, float]
PredicateType = str  # "=" or "!="


@enum.unique
class StateResource(enum.Enum):
    ACTORS = "actors"
    JOBS = "jobs"
    PLACEMENT_GROUPS = "placement_groups"
    NODES = "nodes"
    WORKERS = "workers"
    TASKS = "tasks"
    OBJECTS = "objects"
    RUNTIME_ENVS = "runtime_envs"
    CLUSTER_EVENTS = "cluster_events"


@enum.unique
class SummaryResource(enum.Enum):
    ACTORS = "actors"
    TASKS = "tasks"
    OBJECTS = "objects"


def _check_predicates(filters):
    for f in filters:
        if len(f) != 3:
            raise ValueError(f"The given filter has incorrect input type, {f}. Provide (key, predicate, value) "
                             f"tuples.")
        if f[1] not in ("=", "!="):
            raise ValueError(f"Unsupported filter predicate {f[1]} is given. Available predicates: =, !=.")


@dataclass
class ListApiOptions:
    """A list query: at most `limit` entries that pass every filter (filters AND together)."""

    limit: int = DEFAULT_LIMIT
    timeout: int = DEFAULT_RPC_TIMEOUT
    detail: bool = False
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = field(default_factory=list)
    exclude_driver: bool = True
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        # The server answers within a part of the caller's timeout, so that a slow source still leaves time to reply.
        self.timeout = max(1, int(self.timeout * self.server_timeout_multiplier))
        if self.filters is None:
            self.filters = []
        _check_predicates(self.filters)

    def has_conflicting_filters(self) -> bool:
        """True when two '=' filters on one key want different values (nothing can match; warns once)."""
        wanted = {}
        for key, predicate, value in self.filters:
            if predicate != "=":
                continue
            if key in wanted and wanted[key] != value:
                warnings.warn(f"There are multiple '=' filters with the same key '{key}' but different "
                              f"values'{wanted[key]}' & '{value}'. Empty result set will be returned", UserWarning)
                return True
            wanted.setdefault(key, value)
        return False


@dataclass
class GetApiOptions:
    timeout: int = DEFAULT_RPC_TIMEOUT
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        self.timeout = max(1, int(self.timeout * self.server_timeout_multiplier))


@dataclass
class SummaryApiOptions:
    timeout: int = DEFAULT_RPC_TIMEOUT
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = field(default_factory=list)
    summary_by: Optional[str] = None


def state_column(*, filterable: bool, detail: bool = False, **kwargs):
    """A record field: `filterable` may be filtered on; `detail` is filled only for detail queries (default None)."""
    if detail and "default" not in kwargs:
        kwargs["default"] = None
    kwargs["metadata"] = {"filterable": filterable, "detail": detail}
    return field(**kwargs)


class StateSchema:
    """What every record class shares: its columns, and dict-like access to its fields."""

    @classmethod
    def list_columns(cls, detail: bool = True) -> List[str]:
        return [f.name for f in dataclasses.fields(cls) if detail or not f.metadata.get("detail", False)]

    @classmethod
    def columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def filterable_columns(cls) -> Set[str]:
        return {f.name for f in dataclasses.fields(cls) if f.metadata.get("filterable", False)}

    @classmethod
    def base_columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=False))

    @classmethod
    def detail_columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def column_types(cls) -> Dict[str, Any]:
        return {f.name: f.type for f in dataclasses.fields(cls)}

    def asdict(self):
        return dataclasses.asdict(self)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        setattr(self, key, value)

    def get(self, key, default=None):
        return getattr(self, key, default)


@dataclass
class ActorState(StateSchema):
    """An actor, from the head's directory of actors."""

    actor_id: str = state_column(filterable=True)
    class_name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    name: Optional[str] = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    pid: Optional[int] = state_column(filterable=True)
    ray_namespace: Optional[str] = state_column(filterable=True)
    serialized_runtime_env: Optional[str] = state_column(filterable=False, detail=True)
    required_resources: Optional[dict] = state_column(filterable=False, detail=True)
    death_cause: Optional[dict] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=False, detail=True)
    placement_group_id: Optional[str] = state_column(detail=True, filterable=True)
    repr_name: Optional[str] = state_column(detail=True, filterable=True)
    num_restarts: int = state_column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: int = state_column(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: int = state_column(filterable=False, detail=True)
    call_site: Optional[str] = state_column(detail=True, filterable=False)
    label_selector: Optional[dict] = state_column(detail=True, filterable=False)
    fallback_strategy: Optional[dict] = state_column(detail=True, filterable=False)


@dataclass
class PlacementGroupState(StateSchema):
    """A placement group or slice group."""

    placement_group_id: str = state_column(filterable=True)
    name: str = state_column(filterable=True)
    creator_job_id: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    bundles: Optional[List[dict]] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=True, detail=True)
    stats: Optional[dict] = state_column(filterable=False, detail=True)
    topology_strategy: Optional[dict] = state_column(filterable=False, detail=True)
    topology_assignments: Optional[dict] = state_column(filterable=False, detail=True)


@dataclass
class NodeState(StateSchema):
    """A node (a host's agent)."""

    node_id: str = state_column(filterable=True)
    node_ip: str = state_column(filterable=True)
    is_head_node: bool = state_column(filterable=True)
    state: str = state_column(filterable=True)
    state_message: Optional[str] = state_column(filterable=False)
    node_name: str = state_column(filterable=True)
    resources_total: dict = state_column(filterable=False)
    labels: dict = state_column(filterable=False)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True)


@dataclass
class WorkerState(StateSchema):
    worker_id: str = state_column(filterable=True)
    is_alive: bool = state_column(filterable=True)
    worker_type: str = state_column(filterable=True)
    exit_type: Optional[str] = state_column(filterable=True)
    node_id: str = state_column(filterable=True)
    ip: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    exit_detail: Optional[str] = state_column(detail=True, filterable=False)
    worker_launch_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    worker_launched_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    debugger_port: Optional[int] = state_column(filterable=True, detail=True)
    num_paused_threads: Optional[int] = state_column(filterable=True, detail=True)


@dataclass
class ClusterEventState(StateSchema):
    """A change the head recorded (GET /api/v0/events), in Ray's event shape."""

    severity: str = state_column(filterable=True)
    time: str = state_column(filterable=False)
    source_type: str = state_column(filterable=True)
    message: str = state_column(filterable=False)
    event_id: str = state_column(filterable=True)
    custom_fields: Optional[dict] = state_column(filterable=False, detail=True)


@dataclass
class TaskState(StateSchema):
    """A task, an actor call or an actor's creation, from what owners report to the head."""

    task_id: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    actor_id: Optional[str] = state_column(filterable=True)
    type: str = state_column(filterable=True)
    func_or_class_name: str = state_column(filterable=True)
    parent_task_id: str = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    worker_id: Optional[str] = state_column(filterable=True)
    worker_pid: Optional[int] = state_column(filterable=True)
    error_type: Optional[str] = state_column(filterable=True)
    language: Optional[str] = state_column(detail=True, filterable=True)
    required_resources: Optional[dict] = state_column(detail=True, filterable=False)
    runtime_env_info: Optional[dict] = state_column(detail=True, filterable=False)
    placement_group_id: Optional[str] = state_column(detail=True, filterable=True)
    events: Optional[List[dict]] = state_column(detail=True, filterable=False)
    profiling_data: Optional[dict] = state_column(detail=True, filterable=False)
    creation_time_ms: Optional[int] = state_column(detail=True, filterable=False)
    start_time_ms: Optional[int] = state_column(detail=True, filterable=False)
    end_time_ms: Optional[int] = state_column(detail=True, filterable=False)
    task_log_info: Optional[dict] = state_column(detail=True, filterable=False)
    error_message: Optional[str] = state_column(detail=True, filterable=False)
    is_debugger_paused: Optional[bool] = state_column(detail=True, filterable=True)
    call_site: Optional[str] = state_column(detail=True, filterable=False)
    label_selector: Optional[dict] = state_column(detail=True, filterable=False)
    fallback_strategy: Optional[dict] = state_column(detail=True, filterable=False)


@dataclass
class ObjectState(StateSchema):
    object_id: str = state_column(filterable=True)
    object_size: int = state_column(filterable=True)
    task_status: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    reference_type: str = state_column(filterable=True)
    call_site: str = state_column(filterable=True)
    type: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    ip: str = state_column(filterable=True)


@dataclass
class RuntimeEnvState(StateSchema):
    runtime_env: dict = state_column(filterable=True)
    success: bool = state_column(filterable=True)
    creation_time_ms: Optional[float] = state_column(filterable=False)
    node_id: str = state_column(filterable=True)
    ref_cnt: Optional[int] = state_column(detail=True, filterable=False)
    error: Optional[str] = state_column(detail=True, filterable=True)


class JobState(StateSchema, JobDetails):
    """A job submitted through the Jobs API: Ray's JobDetails, read as a record."""

    _BASE = ("job_id", "submission_id", "entrypoint", "type", "status", "message", "error_type", "driver_info")

    def __init__(self, **kwargs):
        JobDetails.__init__(self, **kwargs)

    @classmethod
    def filterable_columns(cls) -> Set[str]:
        return {"job_id", "type", "status", "submission_id"}

    @classmethod
    def list_columns(cls, detail: bool = True) -> List[str]:
        return [name for name, _, _ in JobDetails._fields] if detail else list(cls._BASE)

    @classmethod
    def column_types(cls) -> Dict[str, Any]:
        return {name: str for name, _, _ in JobDetails._fields}

    def asdict(self):
        return JobDetails.model_dump(self)


def resource_to_schema(resource: StateResource):
    return {StateResource.ACTORS: ActorState, StateResource.JOBS: JobState, StateResource.NODES: NodeState,
            StateResource.OBJECTS: ObjectState, StateResource.PLACEMENT_GROUPS: PlacementGroupState,
            StateResource.RUNTIME_ENVS: RuntimeEnvState, StateResource.TASKS: TaskState,
            StateResource.WORKERS: WorkerState, StateResource.CLUSTER_EVENTS: ClusterEventState}[resource]
