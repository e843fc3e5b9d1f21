"""The values of Ray's job API (ray.job_submission): JobStatus, JobErrorType, JobInfo, JobType, DriverInfo and
JobDetails, with Ray 2.60's fields, defaults and string forms.

Ray makes DriverInfo and JobDetails pydantic models; here they are small classes of the same behaviour that a
program sees: keyword construction that ignores unknown keys and checks types and enum values (ValueError naming the
field), `dict()` / `model_dump()`, `json()` / `model_dump_json()`, equality by value and pydantic's repr.
"""

import dataclasses
import enum
import json
from typing import Any, Dict, Optional, Union


class JobStatus(str, enum.Enum):
    """The status of a job."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return self.value

    def is_terminal(self) -> bool:
        """True for the statuses a job never leaves: STOPPED, SUCCEEDED and FAILED."""
        return self.value in ("STOPPED", "SUCCEEDED", "FAILED")


class JobErrorType(str, enum.Enum):
    """Why a job failed (JobDetails.error_type)."""

    RUNTIME_ENV_SETUP_FAILURE = "RUNTIME_ENV_SETUP_FAILURE"
    JOB_SUPERVISOR_ACTOR_START_TIMEOUT = "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"
    JOB_SUPERVISOR_ACTOR_START_FAILURE = "JOB_SUPERVISOR_ACTOR_START_FAILURE"
    JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE = "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE"
    JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE = "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"
    JOB_SUPERVISOR_ACTOR_DIED = "JOB_SUPERVISOR_ACTOR_DIED"
    JOB_ENTRYPOINT_COMMAND_START_ERROR = "JOB_ENTRYPOINT_COMMAND_START_ERROR"
    JOB_ENTRYPOINT_COMMAND_ERROR = "JOB_ENTRYPOINT_COMMAND_ERROR"


class JobType(str, enum.Enum):
    """SUBMISSION: a job of the Jobs API; DRIVER: a program that connected by itself (torus lists submissions only)."""

    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


def _resources_asked(info) -> bool:
    return any([info.entrypoint_num_cpus is not None and info.entrypoint_num_cpus > 0,
                info.entrypoint_num_gpus is not None and info.entrypoint_num_gpus > 0,
                info.entrypoint_memory is not None and info.entrypoint_memory > 0,
                info.entrypoint_resources not in (None, {})])


_DEFAULT_MESSAGES = {
    JobStatus.RUNNING: "Job is currently running.",
    JobStatus.STOPPED: "Job was intentionally stopped.",
    JobStatus.SUCCEEDED: "Job finished successfully.",
    JobStatus.FAILED: "Job failed.",
}


@dataclasses.dataclass
class JobInfo:
    """What is recorded of a job and its run (Ray's JobInfo): a status without a message gets Ray's default one."""

    status: JobStatus
    entrypoint: str
    message: Optional[str] = None
    error_type: Optional[JobErrorType] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    runtime_env: Optional[Dict[str, Any]] = None
    entrypoint_num_cpus: Optional[Union[int, float]] = None
    entrypoint_num_gpus: Optional[Union[int, float]] = None
    entrypoint_memory: Optional[int] = None
    entrypoint_resources: Optional[Dict[str, float]] = None
    driver_agent_http_address: Optional[str] = None
    driver_node_id: Optional[str] = None
    driver_exit_code: Optional[int] = None

    def __post_init__(self):
        if isinstance(self.status, str):
            self.status = JobStatus(self.status)
        if self.message is not None:
            return
        if self.status == JobStatus.PENDING:
            message = "Job has not started yet."
            if _resources_asked(self):
                message += (" It may be waiting for resources (CPUs, GPUs, memory, custom resources) to become "
                            "available.")
            if self.runtime_env not in (None, {}):
                message += " It may be waiting for the runtime environment to be set up."
            self.message = message
        else:
            self.message = _DEFAULT_MESSAGES[self.status]

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict: enums as their values, runtime_env as the JSON string `runtime_env_json`."""
        out = dataclasses.asdict(self)
        out["status"] = str(out["status"])
        out["error_type"] = out["error_type"].value if out.get("error_type") else None
        runtime_env = out.pop("runtime_env")
        if runtime_env is not None:
            out["runtime_env_json"] = json.dumps(runtime_env)
        json.dumps(out)  # refuses what JSON cannot hold
        return out

    @classmethod
    def from_json(cls, json_dict: Dict[str, Any]) -> "JobInfo":
        """The JobInfo of a to_json() dict."""
        data = dict(json_dict)
        data["status"] = JobStatus(data["status"])
        data["error_type"] = JobErrorType(data["error_type"]) if data.get("error_type") else None
        runtime_env_json = data.pop("runtime_env_json", None)
        if runtime_env_json is not None:
            data["runtime_env"] = json.loads(runtime_env_json)
        return cls(**data)


_REQUIRED = object()


class _Model:
    """Fields as (name, default or _REQUIRED, check); `check(value)` returns the value to keep or raises ValueError
    (or TypeError) saying what was expected."""

    _fields = ()

    def __init__(self, /, **data):
        for name, default, check in self._fields:
            if name not in data:
                if default is _REQUIRED:
                    raise ValueError(f"1 validation error for {type(self).__name__}\n{name}\n  Field required")
                value = default
            else:
                value = data[name]
                if value is not None or default is _REQUIRED:
                    try:
                        value = check(value)
                    except (TypeError, ValueError) as e:
                        raise ValueError(f"1 validation error for {type(self).__name__}\n{name}\n  {e}") from None
            object.__setattr__(self, name, value)

    def model_dump(self) -> Dict[str, Any]:
        out = {}
        for name, _, _ in self._fields:
            value = getattr(self, name)
            out[name] = value.model_dump() if isinstance(value, _Model) else value
        return out

    dict = model_dump  # pydantic's older name, which Ray's own code calls

    def model_dump_json(self) -> str:
        return json.dumps(self.model_dump(), separators=(",", ":"),
                          default=lambda v: v.value if isinstance(v, enum.Enum) else str(v))

    json = model_dump_json

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None

    def _items(self):
        return ", ".join(f"{name}={getattr(self, name)!r}" for name, _, _ in self._fields)

    def __repr__(self):
        return f"{type(self).__name__}({self._items()})"

    def __str__(self):
        return " ".join(f"{name}={getattr(self, name)!r}" for name, _, _ in self._fields)


def _of_type(kind, what):
    def check(value):
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise TypeError(f"Input should be {what}, got {value!r}")
        return value
    return check


def _enum(cls):
    def check(value):
        try:
            return cls(value)
        except ValueError:
            accepted = ", ".join(f"'{m.value}'" for m in cls)
            raise ValueError(f"Input should be one of {accepted}, got {value!r}") from None
    return check


def _str_map(value):
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"Input should be a dictionary of strings, got {value!r}")
    return value


class DriverInfo(_Model):
    """The process that runs a job's entrypoint: `id`, `node_ip_address` and `pid` (a string, as in Ray)."""

    _fields = (("id", _REQUIRED, _of_type(str, "a valid string")),
               ("node_ip_address", _REQUIRED, _of_type(str, "a valid string")),
               ("pid", _REQUIRED, _of_type(str, "a valid string")))


def _driver_info(value):
    if isinstance(value, DriverInfo):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"Input should be a DriverInfo or a dictionary, got {value!r}")
    return DriverInfo(**value)


_STR = _of_type(str, "a valid string")
_INT = _of_type(int, "a valid integer")


class JobDetails(_Model):
    """A job as the Jobs API shows it (GET /api/jobs/{id}): Ray's JobDetails fields, in Ray's order."""

    _fields = (("type", _REQUIRED, _enum(JobType)),
               ("job_id", None, _STR),
               ("submission_id", None, _STR),
               ("driver_info", None, _driver_info),
               ("status", _REQUIRED, _enum(JobStatus)),
               ("entrypoint", _REQUIRED, _STR),
               ("message", None, _STR),
               ("error_type", None, _STR),
               ("start_time", None, _INT),
               ("end_time", None, _INT),
               ("metadata", None, _str_map),
               ("runtime_env", None, _of_type(dict, "a valid dictionary")),
               ("driver_agent_http_address", None, _STR),
               ("driver_node_id", None, _STR),
               ("driver_exit_code", None, _INT))
