"""ray.serve.context: ReplicaContext, what serve.get_replica_context() returns inside a replica.

The replica process (torus.serve._replica) sets it before it constructs the deployment, so the constructor can
read it too. `replica_tag` is the replica's gang run id (also its name in `torus serve status`); `rank` is None
(the head does not number a service's replicas) and `world_size` the replicas asked for when it was deployed.

Thread-safety: set once per process, before any request; read from any thread.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from torus.serve.handle import DeploymentID


@dataclass(frozen=True)
class ReplicaID:
    """A unique identifier for a replica."""

    unique_id: str
    deployment_id: DeploymentID

    def to_full_id_str(self) -> str:
        s = f"{self.deployment_id.name}#{self.unique_id}"
        if self.deployment_id.app_name:
            s = f"{self.deployment_id.app_name}#{s}"
        return f"SERVE_REPLICA::{s}"


@dataclass
class ReplicaContext:
    """Runtime context of a replica: app_name, deployment, replica_tag, servable_object (the user's instance or
    function), rank, world_size."""

    replica_id: ReplicaID
    servable_object: Callable
    _deployment_config: Any = None
    rank: Optional[int] = None
    world_size: int = 1
    _handle_registration_callback: Optional[Callable] = None
    gang_context: Any = None
    code_version: Optional[str] = field(default=None)

    @property
    def app_name(self) -> str:
        return self.replica_id.deployment_id.app_name

    @property
    def deployment(self) -> str:
        return self.replica_id.deployment_id.name

    @property
    def replica_tag(self) -> str:
        return self.replica_id.unique_id


_INTERNAL_REPLICA_CONTEXT: Optional[ReplicaContext] = None


def _get_internal_replica_context() -> Optional[ReplicaContext]:
    return _INTERNAL_REPLICA_CONTEXT


def _set_internal_replica_context(context: Optional[ReplicaContext]):
    global _INTERNAL_REPLICA_CONTEXT
    _INTERNAL_REPLICA_CONTEXT = context
