"""list_named_actors (as ray.util.list_named_actors): the named actors of the cluster that are not dead, from the
head's actor directory (GET /api/v0/actors)."""

import json

from torus._private import state as _st
from torus._private import worker as _worker


def list_named_actors(all_namespaces=False):
    """The names of the live named actors (detached or not) in this program's namespace; with all_namespaces=True,
    those of every namespace as {"name": ..., "namespace": ...}. An actor is listed from its creation until it is
    DEAD (restarting counts as live)."""
    state = _worker.state_or_init()
    listed = json.loads(_st.import_core().list_actors(_worker.http_address(state), state.token, "", ""))
    out = []
    for actor in listed:
        if not actor.get("name") or actor["state"] == "DEAD":
            continue
        if all_namespaces:
            out.append({"name": actor["name"], "namespace": actor["namespace"]})
        elif actor["namespace"] == state.namespace:
            out.append(actor["name"])
    return out
