"""torus: tasks and objects on a torus cluster, with Ray's names (`import torus as ray` ports most programs).

    import torus
    torus.init()                     # this machine's cluster, or a new local one

    @torus.remote(resources={"TPU": 1})
    def chips():
        import os
        return os.environ["TPU_VISIBLE_CHIPS"]

    print(torus.get([chips.remote() for _ in range(4)]))
"""

from torus import exceptions, util
from torus._actor import ActorHandle, get_actor, kill
from torus._remote import remote
from torus._runtime import (ObjectRef, available_resources, cancel, cluster_resources, get, init, is_initialized,
                            nodes, put, shutdown, wait)
from torus.runtime_context import get_runtime_context

__all__ = ["ActorHandle", "available_resources", "cancel", "kill", "ObjectRef", "util", "cluster_resources", "exceptions", "get", "get_actor", "get_runtime_context", "init",
           "is_initialized", "nodes", "put", "remote", "shutdown", "wait"]
