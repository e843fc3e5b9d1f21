"""The cluster's actors and tasks as the head lists them (as ray.util.state): list_actors, get_actor, list_tasks,
summarize_tasks.

    from torus.util.state import list_actors, list_tasks
    list_actors(filters=[("state", "=", "ALIVE")])
    list_tasks(filters=[("name", "=", "__main__.step"), ("state", "!=", "FINISHED")], limit=1000)

Each item is a dict whose keys also read as attributes (`a.state`, `t.node_id`); the fields are those of
GET /api/v0/actors and /api/v0/tasks (docs/rest.md).
"""

import json

from torus._private import state as _st
from torus._private import worker as _worker

_OPS = ("=", "!=")


class _Record(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _api():
    state = _worker.state_or_init()
    return _st.import_core(), _worker.http_address(state), state.token


def _check_filters(filters):
    checked = []
    for f in filters or []:
        if not isinstance(f, (tuple, list)) or len(f) != 3 or f[1] not in _OPS:
            raise ValueError(f"filters: each filter is (key, '=' or '!=', value), got {f!r}")
        checked.append((str(f[0]), f[1], f[2]))
    return checked


def _server_side(filters, keys):
    """The '=' filters the head applies itself (its query parameters), by key."""
    return {k: str(v) for k, op, v in filters if op == "=" and k in keys}


def _keep(items, filters, limit):
    out = []
    for item in items:
        if all((str(item.get(k)) == str(v)) == (op == "=") for k, op, v in filters):
            out.append(_Record(item))
            if len(out) >= limit:
                break
    return out


def list_actors(filters=None, limit=1000):
    """Actors of the cluster, newest first, that pass every filter."""
    filters = _check_filters(filters)
    core, http, token = _api()
    server = _server_side(filters, ("state", "job_id"))
    items = json.loads(core.list_actors(http, token, server.get("state", ""), server.get("job_id", "")))
    return _keep(items, filters, limit)


def get_actor(actor_id):
    """One actor by id (hex), or None."""
    found = list_actors(filters=[("actor_id", "=", actor_id)], limit=1)
    return found[0] if found else None


def list_tasks(filters=None, limit=1000):
    """Tasks and actor calls, newest first (the head keeps the newest 10,000), that pass every filter."""
    filters = _check_filters(filters)
    if not isinstance(limit, int) or not 1 <= limit <= 10000:
        raise ValueError(f"limit: a whole number from 1 to 10000, got {limit!r}")
    core, http, token = _api()
    server = _server_side(filters, ("state", "job_id", "name"))
    # The other filters are applied here: ask for as many as the head keeps so that they see them all.
    asked = limit if len(server) == len(filters) else 10000
    items = json.loads(core.list_tasks(http, token, server.get("state", ""), server.get("job_id", ""),
                                       server.get("name", ""), asked))
    return _keep(items, filters, limit)


def summarize_tasks():
    """{function name: {state: count}} over every task reported since the head started."""
    core, http, token = _api()
    out = {}
    for s in json.loads(core.task_summary(http, token)):
        out.setdefault(s["name"], {})[s["state"]] = s["count"]
    return out
