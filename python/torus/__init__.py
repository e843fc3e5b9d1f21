"""torus: tasks, actors and objects on a torus cluster, with Ray's names (`import torus as ray` ports Ray programs).

    import torus
    torus.init()                     # this machine's cluster, or a new local one

    @torus.remote(resources={"TPU": 1})
    def chips():
        import os
        return os.environ["TPU_VISIBLE_CHIPS"]

    print(torus.get([chips.remote() for _ in range(4)]))

The package is laid out as Ray's module tree: torus.actor stands for ray.actor, torus.util.tpu for ray.util.tpu,
and so on; torus._private holds what Ray keeps in ray._private (the connection, options, serialization).
"""

from torus import exceptions
from torus._private.ids import (ActorClassID, ActorID, FunctionID, JobID, NodeID, ObjectID, PlacementGroupID, TaskID,
                                UniqueID, WorkerID)
from torus._private.generators import DynamicObjectRefGenerator, ObjectRefGenerator
from torus._private.make_remote import remote
from torus._private.object_ref import ObjectRef
from torus._private.worker import (SCRIPT_MODE, WORKER_MODE, available_resources, cancel, cluster_resources, get,
                                   get_gpu_ids, init, is_initialized, nodes, put, shutdown, wait)
from torus.actor import ActorClass, ActorHandle, get_actor, kill, method
from torus.remote_function import RemoteFunction
from torus.runtime_context import get_runtime_context
from torus import util  # noqa: E402  (util's modules use the names above)

__all__ = ["ActorClassID", "ActorID", "FunctionID", "JobID", "NodeID", "ObjectID", "PlacementGroupID", "TaskID",
           "UniqueID", "WorkerID", "DynamicObjectRefGenerator", "ObjectRefGenerator", "SCRIPT_MODE", "WORKER_MODE", "get_gpu_ids", "ActorClass", "ActorHandle", "ObjectRef", "RemoteFunction", "available_resources", "cancel",
           "cluster_resources", "exceptions", "get", "get_actor", "get_runtime_context", "init", "is_initialized",
           "kill", "method", "nodes", "put", "remote", "shutdown", "util", "wait"]
