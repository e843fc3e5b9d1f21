"""Log files (as ray.util.state's list_logs and get_log), read through the head from each node's agent (GET
/api/v0/nodes/{id}/logs and /log, docs/rest.md) and, for a submitted job, from the head's job log.

A node's files are `agent` (the agent's own log), `tpu/<file>` (libtpu's logs) and `workers/<worker id>` (each
worker's output); list_logs groups them as {"agent": [...], "tpu": [...], "worker": [...]}. get_log reads one by
`filename`, or a job's output by `submission_id`; the agents do not map actor, task or process ids to files, so
those raise NotImplementedError naming the way that works (list_logs, then filename=).
"""

import fnmatch
import re
import time
import urllib.parse
from typing import Dict, Generator, List, Optional

from torus.util.state._client import StateApiClient
from torus.util.state.common import DEFAULT_RPC_TIMEOUT
from torus.util.state.exception import RayStateApiException

_CHUNK = 1 << 20
_TAIL_WINDOW = 64 << 10
_FOLLOW_INTERVAL_S = 1.0
_JOB_WAIT_MS = 10_000
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _group(name):
    if name == "agent":
        return "agent"
    if name.startswith("tpu/"):
        return "tpu"
    if name.startswith("workers/"):
        return "worker"
    return "internal"


def _node_id(client, node_id, node_ip, timeout):
    if node_id:
        return node_id
    nodes, _ = client._get("/api/v0/nodes", None, timeout)
    found = sorted((n["state"] != "ALIVE", n["node_id"]) for n in nodes or [] if n["address"] == node_ip)
    if not found:
        raise RayStateApiException(f"Node with ip {node_ip} is not found in the cluster.")
    return found[0][1]


def list_logs(address: Optional[str] = None, node_id: Optional[str] = None, node_ip: Optional[str] = None,
              glob_filter: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT) -> Dict[str, List[str]]:
    """{group: [file names]} of one node's log files that match `glob_filter` (default "*")."""
    assert node_ip is not None or node_id is not None, "At least one of node ip and node id is required"
    client = StateApiClient(address=address)
    node = _node_id(client, node_id, node_ip, timeout)
    listing, _ = client._get(f"/api/v0/nodes/{urllib.parse.quote(node, safe='')}/logs", None, timeout)
    if listing is None:
        raise RayStateApiException(f"Node {node} does not exist.")
    out = {}
    for f in listing.get("files", []):
        if fnmatch.fnmatch(f["name"], glob_filter or "*"):
            out.setdefault(_group(f["name"]), []).append(f["name"])
    return out


def _check(node_id, node_ip, filename, actor_id, task_id, pid, tail, follow, interval, suffix, submission_id):
    if interval is not None and not follow:
        raise AssertionError("_interval is only used with follow=True")
    if not (node_id or node_ip) and not (actor_id or task_id):
        raise ValueError("node_id or node_ip must be provided as constructor arguments when no actor or task_id is "
                         "supplied as arguments.")
    if node_id and node_ip:
        raise ValueError(f"Both node_id and node_ip are given. Only one of them can be provided. Given node id: "
                         f"{node_id}, given node ip: {node_ip}")
    if not (actor_id or task_id or pid or filename or submission_id):
        raise ValueError("None of actor_id, task_id, pid, submission_id or filename is provided. At least one of "
                         "them is required to fetch logs.")
    if suffix not in ("out", "err"):
        raise ValueError(f"Invalid suffix: {suffix}. Must be one of 'out' or 'err'.")
    int(tail)
    if submission_id is None and filename is None:
        raise NotImplementedError("get_log: torus's agents name worker logs by worker id, not by actor, task or "
                                  "process id; find the file with list_logs(node_id=...) and pass filename=")


def _file_reader(client, node, name, timeout):
    path = f"/api/v0/nodes/{urllib.parse.quote(node, safe='')}/log"

    def read(offset):
        """(text from `offset` to the end as it is now, where it began, where it ended)."""
        parts, start, end = [], None, offset
        while True:
            reply, _ = client._get(path, {"file": name, "offset": end, "max_bytes": _CHUNK}, timeout)
            if reply is None:
                raise RayStateApiException(f"Log file {name} is not found on node {node}.")
            start = reply["offset"] if start is None else start
            parts.append(reply["data"])
            if reply["next_offset"] >= reply["size"] or reply["next_offset"] == reply["offset"]:
                return "".join(parts), start, reply["next_offset"]
            end = reply["next_offset"]
    return read


def _job_reader(client, submission_id, timeout):
    path = f"/api/v0/jobs/{urllib.parse.quote(submission_id, safe='')}/logs"

    def read(offset, wait_ms=0):
        reply, _ = client._get(path, {"offset": offset, "wait_ms": wait_ms}, timeout + wait_ms / 1000)
        if reply is None:
            raise RayStateApiException(f"Job {submission_id} does not exist.")
        return reply["data"], reply["next_offset"], reply["finished"]
    return read


def _last_lines(read, lines):
    """(the last `lines` lines of a file, the offset after them)."""
    window = _TAIL_WINDOW
    while True:
        text, start, end = read(-window)
        kept = text.splitlines(keepends=True)
        if start <= 0 or len(kept) > lines:
            return "".join(kept[-lines:] if lines else []), end
        window *= 4


def get_log(address: Optional[str] = None, node_id: Optional[str] = None, node_ip: Optional[str] = None,
            filename: Optional[str] = None, actor_id: Optional[str] = None, task_id: Optional[str] = None,
            pid: Optional[int] = None, follow: bool = False, tail: int = -1, timeout: int = DEFAULT_RPC_TIMEOUT,
            suffix: str = "out", encoding: Optional[str] = "utf-8", errors: Optional[str] = "strict",
            submission_id: Optional[str] = None, attempt_number: int = 0, _interval: Optional[float] = None,
            filter_ansi_code: bool = False) -> Generator[str, None, None]:
    """Yields a log's content (the last `tail` lines, or all of it for -1), then, with `follow`, what is written
    to it next. Bytes instead of text when `encoding` is None."""
    _check(node_id, node_ip, filename, actor_id, task_id, pid, tail, follow, _interval, suffix, submission_id)
    if encoding is not None and encoding.replace("-", "").lower() != "utf8":
        raise ValueError(f"encoding: the head sends logs as UTF-8 text; use 'utf-8' or None, got {encoding!r}")
    tail = int(tail)

    def out(text):
        text = _ANSI.sub("", text) if filter_ansi_code else text
        return text if encoding is not None else text.encode("utf-8")

    client = StateApiClient(address=address)
    if submission_id is not None:
        read = _job_reader(client, submission_id, timeout)
        text, offset, finished = read(0)
        if tail >= 0:
            text = "".join(text.splitlines(keepends=True)[-tail:] if tail else [])
        if text:
            yield out(text)
        while follow and not finished:
            text, offset, finished = read(offset, _JOB_WAIT_MS)
            if text:
                yield out(text)
        return
    node = _node_id(client, node_id, node_ip, timeout)
    read = _file_reader(client, node, filename, timeout)
    if tail >= 0:
        text, offset = _last_lines(read, tail)
    else:
        text, _, offset = read(0)
    if text:
        yield out(text)
    while follow:
        time.sleep(_interval or _FOLLOW_INTERVAL_S)
        text, _, offset = read(offset)
        if text:
            yield out(text)
