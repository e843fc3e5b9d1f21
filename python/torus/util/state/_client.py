"""StateApiClient (as ray.util.state.StateApiClient): list, get and summarize the cluster's resources from the
head's HTTP API (docs/rest.md), with Ray's filters, limits, records and errors.

Where it asks: `address` None or "auto" in a process connected to a cluster (init()) is that cluster's head, with
this process's token; otherwise the address is resolved as the job client resolves it (torus.job_submission:
RAY_API_SERVER_ADDRESS / RAY_ADDRESS, "http(s)://host:port", a head's "host:port", or this machine's session).

Sources: actors, tasks (and each actor's creation, made from the actor), nodes, placement groups, jobs and cluster
events come from the head. Workers, objects and runtime environments are not kept anywhere in torus: asking for
them raises NotImplementedError saying so.

Errors as Ray's: a query the API refuses (a bad filter, a limit over 10,000) raises RayStateApiException("API
server internal error. ... Error: <why>"); an unreachable head raises ServerUnavailable; output missing because the
head forgot older tasks raises RayStateApiException unless raise_on_missing_output=False.

Thread-safety: a client holds no connection; its methods may be called from several threads.
"""

import itertools
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any, Dict, Optional

from torus import exceptions
from torus._private import state as _st
from torus.job_submission import _connection
from torus.util.state import _records, _filters, _summaries
from torus.util.state.common import (RAY_MAX_LIMIT_FROM_API_SERVER, GetApiOptions, ListApiOptions, StateResource,
                                     SummaryApiOptions, SummaryResource, resource_to_schema)
from torus.util.state.exception import RayStateApiException, ServerUnavailable

logger = logging.getLogger(__name__)

_UNSERVED = {
    StateResource.WORKERS: "torus's head keeps no table of worker processes (each node's agent supervises its own; "
                           "their output files are listed by list_logs(node_id=...))",
    StateResource.OBJECTS: "torus keeps no cluster-wide table of objects (each object is known only to the process "
                           "that owns it)",
    StateResource.RUNTIME_ENVS: "torus's agents build no runtime environments to list (env_vars and working_dir "
                                "are applied as each worker starts)",
}

_ID_KEYS = {StateResource.NODES: "node_id", StateResource.ACTORS: "actor_id",
            StateResource.PLACEMENT_GROUPS: "placement_group_id", StateResource.WORKERS: "worker_id",
            StateResource.TASKS: "task_id", StateResource.OBJECTS: "object_id", StateResource.JOBS: "submission_id"}


def refuse_unserved(resource):
    if resource in _UNSERVED:
        raise NotImplementedError(f"The state API's {resource.value} are not available in torus: "
                                  f"{_UNSERVED[resource]}")


def _api_error(message):
    return RayStateApiException(f"API server internal error. See dashboard.log file for more details. "
                                f"Error: {message}")


class StateApiClient:
    """Queries one cluster's state. `headers` are sent with every request (an Authorization header in them is the
    token); `cookies` as a Cookie header."""

    def __init__(self, address: Optional[str] = None, cookies: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, Any]] = None):
        self._headers = dict(headers or {"Content-Type": "application/json"})
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        state = _st.current()
        asked = os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or address
        if state is not None and (asked in (None, "", "auto") or
                                  _connection._same_host_port(asked, state.head_address)):
            from torus._private import worker as _worker
            scheme = "https" if os.environ.get("TORUS_TLS_CA") else "http"
            self._address = f"{scheme}://{_worker.http_address(state)}"
            session = None
            if not any(k.lower() == "authorization" for k in self._headers):
                self._headers["Authorization"] = f"Bearer {state.token}"
        else:
            given = next((str(v) for k, v in self._headers.items() if k.lower() == "authorization"), None)
            self._address, session = _connection.resolve_url(address, given.split(" ", 1)[-1] if given else None)
            self._headers.update(_connection.auth_headers(self._headers, session))
        self._ssl_context = _connection.ssl_context(self._address, True, session)
        host = urllib.parse.urlsplit(self._address).hostname or ""
        self._head_host = "127.0.0.1" if host in ("localhost", "::1") else host

    @property
    def address(self):
        """The head's HTTP API this client asks."""
        return self._address

    # --- requests ---

    def _get(self, endpoint, params=None, timeout=None):
        """(the JSON answer, its headers) of GET `endpoint`; None for the answer when the head says 404."""
        url = self._address + endpoint + ("?" + urllib.parse.urlencode(params) if params else "")
        request = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._ssl_context) as reply:
                return json.loads(reply.read()), reply.headers
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            if e.code == 404:
                return None, e.headers
            if e.code in (401, 403):
                raise exceptions.AuthenticationError(f"Authentication failed: {text.strip()}") from None
            try:
                text = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise _api_error(text) from None
        except (urllib.error.URLError, OSError) as e:
            raise ServerUnavailable(f"Failed to make request to {self._address}{endpoint}. Failed to connect to the "
                                    f"head's HTTP API ({getattr(e, 'reason', e)}); check that the cluster is up and "
                                    f"that the address is its head's.") from None

    def _list_of(self, endpoint, timeout, params=None):
        answer, headers = self._get(endpoint, params, timeout)
        return answer or [], headers

    # --- sources: (rows, how many exist, how many the head still holds) ---

    def _actors(self, timeout):
        return self._list_of("/api/v0/actors", timeout)[0]

    def _rows(self, resource, options):
        timeout = options.timeout
        if resource == StateResource.ACTORS:
            rows = [_records.actor(a) for a in self._actors(timeout)]
        elif resource == StateResource.TASKS:
            # The counts first: a task reported meanwhile then adds to what is held, never to what is missing.
            summary = self._list_of("/api/v0/tasks/summary", timeout)[0]
            tasks, headers = self._list_of("/api/v0/tasks", timeout, {"limit": RAY_MAX_LIMIT_FROM_API_SERVER})
            actors = self._actors(timeout)
            by_id = {a["actor_id"]: a for a in actors}
            rows = [_records.task(t, by_id) for t in tasks] + [_records.creation_task(a) for a in actors]
            held = int(headers.get("X-Total-Count", len(tasks))) if headers else len(tasks)
            return rows, sum(s["count"] for s in summary) + len(actors), held + len(actors)
        elif resource == StateResource.NODES:
            nodes = self._list_of("/api/v0/nodes", timeout)[0]
            died = {}
            if options.detail and any(n["state"] != "ALIVE" for n in nodes):
                log = self._get("/api/v0/events", {"kind": "node"}, timeout)[0] or {}
                died = {e["id"]: e.get("time_ms") for e in log.get("events", []) if e["type"] == "NodeDied"}
            rows = [_records.node(n, self._head_host, died.get(n["node_id"])) for n in nodes]
        elif resource == StateResource.PLACEMENT_GROUPS:
            rows = [_records.placement_group(g) for g in self._list_of("/api/v0/placement_groups", timeout)[0]]
        elif resource == StateResource.JOBS:
            rows = self._list_of("/api/v0/jobs", timeout)[0]
        elif resource == StateResource.CLUSTER_EVENTS:
            log = self._get("/api/v0/events", None, timeout)[0] or {}
            rows = [_records.cluster_event(e, log.get("epoch", 0)) for e in log.get("events", [])]
        else:
            refuse_unserved(resource)
            raise ValueError(f"Unknown resource {resource}")
        return rows, len(rows), len(rows)

    def _query(self, resource, options):
        """(records as dicts, sorted and limited; how many matched; how many exist; how many the head held)."""
        rows, total, held = self._rows(resource, options)
        schema = resource_to_schema(resource)
        try:
            if options.limit > RAY_MAX_LIMIT_FROM_API_SERVER:
                raise ValueError(f"Given limit {options.limit} exceeds the supported limit "
                                 f"{RAY_MAX_LIMIT_FROM_API_SERVER}. Use a lower limit, or set the "
                                 f"`RAY_MAX_LIMIT_FROM_API_SERVER` environment variable to a larger value.")
            matched = _filters.apply(rows, options.filters, schema, options.detail)
            if resource != StateResource.CLUSTER_EVENTS:  # events stay in the order they happened
                key = _ID_KEYS.get(resource, "job_id")
                matched.sort(key=lambda row: row.get(key) or "")
            kept = list(itertools.islice(matched, options.limit))
        except ValueError as e:
            raise _api_error(str(e)) from None
        return kept, len(matched), total, held

    def _check_missing(self, resource, total, held):
        if total > held:
            raise RayStateApiException(
                f"Failed to retrieve all {total} {resource.value} from the cluster because they are not reachable "
                f"due to data truncation. It happens when the returned data is too large (> {held}) To avoid raising "
                f"an exception and allow having missing output, set `raise_on_missing_output=False`. ")

    @staticmethod
    def _warn(resource, returned, matched, total, held):
        if total > held:
            warnings.warn(f"The returned data may contain incomplete result. {held} ({total} total from the cluster) "
                          f"{resource.value} are retrieved from the data source. {total - held} entries have been "
                          f"truncated.")
        if matched > returned:
            warnings.warn(f"Limit last {returned} entries (Total {matched}). Use `--filter` to reduce the amount of "
                          f"data to return or setting a higher limit with `--limit` to see all data. ")

    # --- Ray's methods ---

    def get(self, resource: StateResource, id: str, options: Optional[GetApiOptions], _explain: bool = False):
        """The record of `resource` whose id is `id`, or None; a list for objects. Only resources with ids."""
        if resource not in _ID_KEYS:
            raise ValueError(f"Can't get {resource.name} by id.")
        refuse_unserved(resource)
        options = options or GetApiOptions()
        query = ListApiOptions(limit=100, detail=True, filters=[(_ID_KEYS[resource], "=", id)])
        query.timeout = options.timeout
        found, _, _, _ = self._query(resource, query)
        schema = resource_to_schema(resource)
        if not found:
            return None
        records = [schema(**row) for row in found]
        if resource == StateResource.TASKS and len(records) > 1:
            return records
        return records[0]

    def list(self, resource: StateResource, options: ListApiOptions, raise_on_missing_output: bool,
             _explain: bool = False):
        """The records of `resource` that pass `options`' filters, sorted by id, at most `options.limit`."""
        refuse_unserved(resource)
        if options.has_conflicting_filters():
            return []
        if _explain:
            logger.info("Querying %s%s", self._address, f"/api/v0/{resource.value}")
        kept, matched, total, held = self._query(resource, options)
        if raise_on_missing_output:
            self._check_missing(resource, total, held)
        if _explain:
            self._warn(resource, len(kept), matched, total, held)
        schema = resource_to_schema(resource)
        return [schema(**row) for row in kept]

    def summary(self, resource: SummaryResource, *, options: SummaryApiOptions, raise_on_missing_output: bool,
                _explain: bool = False) -> Dict:
        """{"cluster": summary} of tasks (by function name) or actors (by class), as Ray's API answers it."""
        listed = StateResource(resource.value)
        refuse_unserved(listed)
        by = options.summary_by or ("func_name" if listed == StateResource.TASKS else None)
        if listed == StateResource.TASKS and by not in ("func_name", "task_name"):
            raise _api_error(f"summary_by {by!r} is not available in torus: tasks are summarized by "
                             f"\"func_name\" or \"task_name\" (the head does not know a task's parent for "
                             f"\"lineage\")")
        query = ListApiOptions(limit=RAY_MAX_LIMIT_FROM_API_SERVER, filters=list(options.filters or []))
        query.timeout = options.timeout
        rows, _, total, held = self._query(listed, query)
        if raise_on_missing_output:
            self._check_missing(listed, total, held)
        if _explain and total > held:
            self._warn(listed, len(rows), len(rows), total, held)
        made = _summaries.tasks(rows) if listed == StateResource.TASKS else _summaries.actors(rows)
        return {"cluster": made}
