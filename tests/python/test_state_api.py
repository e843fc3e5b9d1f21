"""torus.util.state against a fake head (an http.server on 127.0.0.1, ephemeral port) that answers the head's routes
from fixed views: what the differential suite cannot compare with Ray — the records torus makes from the head's
views (Ray's names, types and states, actor creations), output the head no longer holds, node log files, and the
resources torus does not keep.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List

import pytest

from torus.util import state
from torus.util.state import _logs
from torus.util.state.exception import RayStateApiException

TOKEN = "state-token"
AGENT_LOG = "line one\nline two\nline three\nline four\nline five\n"


class FakeHead:
    """Answers GET routes: `routes[path]` is a JSON value, or a function of the query giving (status, value,
    headers). Records every path asked; refuses a wrong token with 401."""

    def __init__(self):
        self.routes: Dict[str, Any] = {}
        self.asked: List[str] = []
        self.url = ""

    def answer(self, path, query, headers):
        self.asked.append(path)
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, {"error": "bad token"}, {}
        route = self.routes.get(path)
        if route is None:
            return 404, {"error": f"no route GET {path}"}, {}
        if callable(route):
            return route(query)
        return 200, route, {}


@pytest.fixture
def head(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHead]:
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "TORUS_DASHBOARD_ADDRESS", "TORUS_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORUS_TOKEN", TOKEN)
    fake = FakeHead()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            parts = urllib.parse.urlsplit(self.path)
            query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
            status, value, headers = fake.answer(parts.path, query, dict(self.headers))
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _actor(**overrides):
    view = {"actor_id": "a1" * 16, "name": "", "namespace": "ns", "class_name": "__main__.A", "state": "ALIVE",
            "job_id": "driver-1", "owner_address": "127.0.0.1:1", "node_id": "n1", "pid": 42,
            "address": "127.0.0.1:2", "resources": {}, "restarts": 0, "max_restarts": 0, "max_task_retries": 0,
            "is_detached": False, "death_cause": "", "create_time_ms": 1000, "start_time_ms": 1100,
            "end_time_ms": 0, "methods": ["p"]}
    view.update(overrides)
    return view


def _task(task_id, name, task_state, actor_id="", error="", pid=7, node="n1"):
    return {"task_id": task_id, "name": name, "state": task_state, "job_id": "driver-1", "actor_id": actor_id,
            "owner_address": "127.0.0.1:1", "node_id": node, "pid": pid, "attempt": 0, "error": error,
            "submit_time_ms": 1000, "start_time_ms": 1001 if task_state != "PENDING" else 0,
            "end_time_ms": 1002 if task_state in ("FINISHED", "FAILED") else 0}


def _tasks_route(tasks, held=None):
    def route(query):
        return 200, tasks, {"X-Total-Count": str(len(tasks) if held is None else held)}
    return route


def test_unserved_resources_raise_before_asking_the_head(head):
    calls: List[Callable[[], Any]] = [
        lambda: state.list_workers(address=head.url), lambda: state.get_worker("w", address=head.url),
        lambda: state.list_objects(address=head.url), lambda: state.get_objects("o", address=head.url),
        lambda: state.summarize_objects(address=head.url), lambda: state.list_runtime_envs(address=head.url)]
    for call in calls:
        with pytest.raises(NotImplementedError, match="not available in torus"):
            call()
    assert head.asked == []


def test_tasks_read_with_rays_names_types_and_states_and_actor_creations(head):
    actor_id = "a1" * 16
    head.routes["/api/v0/actors"] = [_actor(name="keeper")]
    head.routes["/api/v0/tasks/summary"] = [{"name": "__main__.f", "state": "FINISHED", "count": 1}]
    head.routes["/api/v0/tasks"] = _tasks_route([
        _task("t1", "__main__.f", "FINISHED"),
        _task("t2", "__main__.A.p", "RUNNING", actor_id=actor_id, pid=0, node=""),
        _task("t3", "custom.name", "PENDING", pid=0, node=""),
        _task("t4", "__main__.boom", "FAILED", error="it raised an exception")])
    rows = {t.task_id: t for t in state.list_tasks(address=head.url, detail=True)}
    assert {(t.name, t.func_or_class_name, t.type, t.state) for t in rows.values()} == {
        ("f", "f", "NORMAL_TASK", "FINISHED"),
        ("A.p", "A.p", "ACTOR_TASK", "RUNNING"),
        ("custom.name", "custom.name", "NORMAL_TASK", "PENDING_NODE_ASSIGNMENT"),
        ("boom", "boom", "NORMAL_TASK", "FAILED"),
        ("keeper:A.__init__", "keeper:A.__init__", "ACTOR_CREATION_TASK", "FINISHED")}
    assert (rows["t2"].node_id, rows["t2"].worker_pid) == ("n1", 42)  # the actor's, which the caller did not see
    assert (rows["t4"].error_type, rows["t4"].error_message) == ("TASK_EXECUTION_EXCEPTION", "it raised an exception")
    assert [e["state"] for e in rows["t1"].events] == ["PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"]
    assert rows[actor_id].actor_id == actor_id
    summary = state.summarize_tasks(address=head.url)["cluster"]
    assert (summary["total_tasks"], summary["total_actor_tasks"], summary["total_actor_scheduled"]) == (3, 1, 1)
    assert [a.class_name for a in state.list_actors(address=head.url)] == ["A"]


def test_tasks_the_head_no_longer_holds_raise_unless_missing_output_is_allowed(head):
    head.routes["/api/v0/actors"] = []
    head.routes["/api/v0/tasks/summary"] = [{"name": "__main__.f", "state": "FINISHED", "count": 5}]
    head.routes["/api/v0/tasks"] = _tasks_route([_task("t1", "__main__.f", "FINISHED")], held=1)
    with pytest.raises(RayStateApiException, match=r"Failed to retrieve all 5 tasks from the cluster"):
        state.list_tasks(address=head.url)
    assert [t.task_id for t in state.list_tasks(address=head.url, raise_on_missing_output=False)] == ["t1"]


def test_nodes_on_the_heads_host_are_head_nodes_and_a_dead_one_ends_at_its_death(head):
    node = {"node_id": "n1", "address": "127.0.0.1", "state": "ALIVE", "death_reason": "", "labels": {},
            "resources_total": {"CPU": 2}, "start_time_ms": 500}
    other = dict(node, node_id="n2", address="10.1.2.3", state="DEAD", death_reason="missed heartbeats")
    head.routes["/api/v0/nodes"] = [node, other]
    head.routes["/api/v0/events"] = {"epoch": 1, "revision": 2, "events": [
        {"revision": 2, "kind": "node", "id": "n2", "type": "NodeDied", "status": "DEAD", "time_ms": 9000}]}
    rows = state.list_nodes(address=head.url, detail=True)
    assert [(n.node_id, n.is_head_node, n.state, n.end_time_ms, n.state_message) for n in rows] == [
        ("n1", True, "ALIVE", 0, None), ("n2", False, "DEAD", 9000, "missed heartbeats")]
    events = state.list_cluster_events(address=head.url)
    assert [(e.severity, e.source_type, e.message) for e in events] == [
        ("ERROR", "GCS", "NodeDied: node n2 is DEAD")]


def _log_route(text):
    def route(query):
        size = len(text)
        offset = int(query.get("offset", 0))
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        end = min(size, start + int(query.get("max_bytes", 65536)))
        return 200, {"node_id": "n1", "file": query["file"], "data": text[start:end], "offset": start,
                     "next_offset": end, "size": size}, {}
    return route


def test_list_logs_groups_a_nodes_files_found_by_id_or_ip(head):
    head.routes["/api/v0/nodes"] = [{"node_id": "n1", "address": "10.0.0.5", "state": "ALIVE"}]
    head.routes["/api/v0/nodes/n1/logs"] = {"node_id": "n1", "tpu_log_dir": "/tmp/tpu_logs", "files": [
        {"name": "agent", "size": 1, "modified_ms": 1}, {"name": "tpu/a.log", "size": 1, "modified_ms": 1},
        {"name": "workers/task-1", "size": 1, "modified_ms": 1}]}
    assert state.list_logs(address=head.url, node_id="n1") == {
        "agent": ["agent"], "tpu": ["tpu/a.log"], "worker": ["workers/task-1"]}
    assert state.list_logs(address=head.url, node_ip="10.0.0.5", glob_filter="workers/*") == {
        "worker": ["workers/task-1"]}
    with pytest.raises(AssertionError, match="At least one of node ip and node id is required"):
        state.list_logs(address=head.url)


def test_get_log_reads_a_whole_file_in_chunks_its_last_lines_and_bytes(head, monkeypatch):
    monkeypatch.setattr(_logs, "_CHUNK", 7)
    monkeypatch.setattr(_logs, "_TAIL_WINDOW", 8)
    head.routes["/api/v0/nodes/n1/log"] = _log_route(AGENT_LOG)
    assert "".join(state.get_log(address=head.url, node_id="n1", filename="agent")) == AGENT_LOG
    assert "".join(state.get_log(address=head.url, node_id="n1", filename="agent", tail=2)) == \
        "line four\nline five\n"
    assert b"".join(state.get_log(address=head.url, node_id="n1", filename="agent", tail=1, encoding=None)) == \
        b"line five\n"


def test_get_log_by_actor_task_or_pid_says_how_to_find_the_file(head):
    for ids in ({"actor_id": "a1" * 16}, {"task_id": "t1"}, {"pid": 42}):
        with pytest.raises(NotImplementedError, match=r"list_logs\(node_id=\.\.\.\) and pass filename="):
            next(state.get_log(address=head.url, node_id="n1", **ids))
    assert head.asked == []
