"""A fake torus head for the tests of the Python training helper.

The fake head is an http.server on 127.0.0.1 (ephemeral port) in a thread. It records every report, checks the
bearer token like the real head, and answers from a queue of scripted responses (200 {"committed": false} when the
queue is empty). commit() mirrors what the real head does once every rank has reported a checkpoint step.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
RUN_ID = "run-0123abcd"
RUN_TOKEN = "secret-run-token"

# Every variable the head sets for a worker; the tests start from an environment without any of them.
WORKER_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "TORUS_RUN_ID",
    "TORUS_RUN_NAME",
    "TORUS_ATTEMPT",
    "TORUS_RANK",
    "TORUS_WORLD_SIZE",
    "TORUS_LOCAL_RANK",
    "TORUS_SLICE_ID",
    "TORUS_STORAGE_PATH",
    "TORUS_CHECKPOINT_DIR",
    "TORUS_REPORT_URL",
    "TORUS_RUN_TOKEN",
)


@dataclass
class Request:
    path: str
    headers: Dict[str, str]
    body: Any


@dataclass
class FakeHead:
    """Records reports; answers with scripted (status, JSON body) pairs, then 200."""

    token: str = RUN_TOKEN
    requests: List[Request] = field(default_factory=list)
    responses: List[Tuple[int, Dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def handle(self, path: str, headers: Dict[str, str], raw: bytes) -> Tuple[int, Dict[str, Any]]:
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self.lock:
            self.requests.append(Request(path, headers, body))
            if self.responses:
                return self.responses.pop(0)
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"error": "missing or wrong run token"}
        if headers.get("Content-Type") != "application/json":
            return 415, {"error": "report must be application/json"}
        return 200, {"committed": False}

    def reports(self) -> List[Dict[str, Any]]:
        with self.lock:
            return [r.body for r in self.requests]

    def last_complete_checkpoint_step(self, attempt: int, world_size: int) -> Optional[int]:
        """The newest step that every rank reported in this attempt and for which some rank staged a checkpoint."""
        ranks_by_step: Dict[int, set] = {}
        checkpoint_steps = set()
        for body in self.reports():
            if body["attempt"] != attempt:
                continue
            ranks_by_step.setdefault(body["step"], set()).add(body["rank"])
            if body["checkpoint"] is not None:
                checkpoint_steps.add(body["step"])
        complete = [s for s in checkpoint_steps if len(ranks_by_step[s]) == world_size]
        return max(complete, default=None)


def commit(storage: Path, attempt: int, step: int, world_size: int) -> Path:
    """Does what the head does on commit: merges the staged rank dirs into checkpoint_<step>/ (lower rank wins)."""
    staged = storage / ".staging" / f"attempt_{attempt}" / f"step_{step}"
    target = storage / f"checkpoint_{step}"
    target.mkdir()
    for rank in range(world_size):
        rank_dir = staged / f"rank_{rank}"
        if not rank_dir.is_dir():
            continue
        for entry in sorted(rank_dir.iterdir()):
            if not (target / entry.name).exists():
                shutil.move(str(entry), str(target / entry.name))
    shutil.rmtree(staged)
    (target / ".torus_committed").write_text(json.dumps({"step": step, "attempt": attempt}))
    return target


def _handler_for(head: FakeHead) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            status, answer = head.handle(self.path, dict(self.headers), raw)
            payload = json.dumps(answer).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler


class running_head:
    """Context manager: a FakeHead served on 127.0.0.1 at an ephemeral port."""

    def __init__(self, run_id: str = RUN_ID) -> None:
        self.head = FakeHead()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self.head))
        self.server.daemon_threads = True
        port = self.server.server_address[1]
        self.head.url = f"http://127.0.0.1:{port}/api/v0/runs/{run_id}/report"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeHead:
        self.thread.start()
        return self.head

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def subprocess_env(extra: Dict[str, str]) -> Dict[str, str]:
    """os.environ without worker variables, with python/ on PYTHONPATH, plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in WORKER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env
