"""placement_group_table()'s rows, made from the head's views of its groups (GET /api/v0/placement_groups[/{id}],
docs/rest.md): Ray's shape, with Ray's words for states and strategies.

    {"placement_group_id": "70672d...", "name": "pair", "bundles": {0: {"CPU": 1.0}, 1: {"CPU": 1.0}},
     "bundles_to_node_id": {0: "6f1e...", 1: "a02c..."}, "strategy": "STRICT_SPREAD", "state": "CREATED",
     "stats": {"end_to_end_creation_latency_ms": 12.0, "scheduling_latency_ms": 12.0, "scheduling_attempt": 1,
               "highest_retry_delay_ms": 0.0, "scheduling_state": "FINISHED"}}

The requested bundles and the strategy come from the view's `request` ("STRICT_SPREAD, 2 bundles {"CPU": 1},
{"CPU": 1}; fallback ..."); a placed group's bundles are what it holds (its fallback's, when one was taken). A slice
group reads as STRICT_SPREAD (a bundle per host) or, with bundles per chip block, SPREAD. The head's FAILED (a
timeout) reads as REMOVED, as Ray has no such state.
"""

import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request

from torus._private import worker as _worker

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_BUNDLES = re.compile(r"^\d+ bundles? (\{.*\})$")


def _get(path):
    """The head's JSON answer to GET `path`, or None for 404."""
    state = _worker.state_or_init()
    address = _worker.http_address(state)
    ca = os.environ.get("TORUS_TLS_CA")
    url = ("https://" if ca else "http://") + address + path
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {state.token}"})
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise RuntimeError(f"the head's {path} answered {e.code}: {e.read().decode(errors='replace')}") from None


def _requested(view):
    """(strategy, [bundle resources]) of a view's request text; bundles [] when the text has none."""
    text = view.get("request", "")
    if view.get("kind") == "slice_group":
        return ("SPREAD" if "per chip" in text else "STRICT_SPREAD"), []
    strategy, _, rest = text.partition(", ")
    if strategy not in _STRATEGIES:
        raise RuntimeError(f"placement group {view['id']}: the head's request {text!r} names no strategy")
    primary = rest.split("; fallback ", 1)[0]
    m = _BUNDLES.match(primary)
    bundles = json.loads(f"[{m.group(1)}]") if m else []
    return strategy, [{k: float(v) for k, v in b.items()} for b in bundles]


def _stats(view):
    history = view.get("history") or []
    created = [e["time_ms"] for e in history if e["state"] == "CREATED"]
    latency = float(created[0] - view.get("created_time_ms", created[0])) if created else 0.0
    pending = [e["time_ms"] for e in history if e["state"] == "PENDING"]
    gaps = [b - a for a, b in zip(pending, pending[1:])]
    state, reason = view["state"], view.get("reason", "")
    if state == "CREATED":
        scheduling = "FINISHED"
    elif state in ("REMOVED", "FAILED"):
        scheduling = "REMOVED"
    elif "infeasible" in reason or "can never" in reason:
        scheduling = "INFEASIBLE"
    elif state == "PENDING" and len(history) <= 1:
        scheduling = "QUEUED"
    else:
        scheduling = "NO_RESOURCES"
    return {"end_to_end_creation_latency_ms": latency, "scheduling_latency_ms": latency,
            "scheduling_attempt": len(pending),
            "highest_retry_delay_ms": float(max(gaps, default=0)), "scheduling_state": scheduling}


def row_of(view):
    """Ray's table row of one head view."""
    strategy, requested = _requested(view)
    placed = {b["index"]: b for b in view.get("bundles") or []}
    if placed:
        bundles = {i: {k: float(v) for k, v in placed[i]["resources"].items()} for i in sorted(placed)}
    else:
        bundles = dict(enumerate(requested))
    nodes = {i: (placed[i].get("node_id", "") if i in placed else "") for i in bundles}
    return {"placement_group_id": view["id"].encode().hex(),
            "name": view.get("name", ""),
            "bundles": bundles,
            "bundles_to_node_id": nodes,
            "strategy": strategy,
            "state": "REMOVED" if view["state"] == "FAILED" else view["state"],
            "stats": _stats(view)}


def table_row(group_id):
    """The row of one group (by the head's id), or None when the head does not know it."""
    view = _get(f"/api/v0/placement_groups/{urllib.parse.quote(group_id, safe='')}")
    if view is None or view.get("id") != group_id:
        return None
    return row_of(view)


def table_all():
    """{hex id: row} of every group the head knows, removed ones included."""
    return {row["placement_group_id"]: row for row in map(row_of, _get("/api/v0/placement_groups") or [])}
