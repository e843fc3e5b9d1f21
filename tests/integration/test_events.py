"""The head's events (/api/v0/events, docs/rest.md) and the reads that wait on them, against a real cluster: a watch
sees a job's changes in order as they happen, a long poll answers when the change comes, a job's log read waits for
output, and `torus job submit` shows output while the job still runs."""

import json
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from conftest import binary, wait_until
from test_jobs_api import job, request, submit


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster


def open_stream(torus, query):
    """An open server-sent event stream of /api/v0/events?watch=1&QUERY."""
    address = (torus.session / "dashboard_address").read_text().strip()
    req = urllib.request.Request(f"http://{address}/api/v0/events?watch=1&{query}")
    req.add_header("Authorization", f"Bearer {torus.token}")
    return urllib.request.urlopen(req, timeout=30)


def read_events(stream, until):
    """(event name, data) pairs from the stream until `until(pairs)` holds."""
    pairs, name, data = [], None, None
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: "):])
        elif line == "" and name is not None:
            pairs.append((name, data))
            name, data = None, None
            if until(pairs):
                return pairs
    return pairs


def test_a_watch_sees_a_jobs_changes_in_order_as_they_happen(cluster):
    code, now = request(cluster, "GET", "/api/v0/events/revision")
    assert code == 200, now
    stream = open_stream(cluster, f"since={now['revision']}&epoch={now['epoch']}&kind=job,worker&id=events-watched")
    job_id = submit(cluster, entrypoint="echo watched; sleep 0.3", submission_id="events-watched")
    pairs = read_events(stream, lambda p: any(d.get("status") == "SUCCEEDED" for _, d in p))
    stream.close()
    assert pairs[0] == ("hello", {"epoch": now["epoch"], "revision": now["revision"]})
    events = [d for name, d in pairs[1:]]
    assert [e["revision"] for e in events] == sorted(e["revision"] for e in events)
    assert all(e["revision"] > now["revision"] for e in events)
    seen = [(e["kind"], e["type"], e.get("status")) for e in events]
    assert seen == [("job", "JobSubmitted", "PENDING"),
                    ("worker", "WorkerStarting", "STARTING"),
                    ("worker", "WorkerStarted", "RUNNING"),
                    ("job", "JobUpdated", "RUNNING"),
                    ("worker", "WorkerExited", "EXITED"),
                    ("job", "JobUpdated", "SUCCEEDED")], seen
    worker_events = [e for e in events if e["kind"] == "worker"]
    assert all(e["job"] == job_id for e in worker_events)
    assert worker_events[-1]["exit"] == {"exit_code": 0, "lost": False, "start_failed": False}


def test_a_long_poll_answers_with_the_change_it_waited_for(cluster):
    code, now = request(cluster, "GET", "/api/v0/events/revision")
    assert code == 200
    job_id = submit(cluster, entrypoint="sleep 1", submission_id="events-long-poll")
    # Waits (up to 30 s) until the job ends: the answer comes with the change, not at the end of the wait.
    since, epoch = now["revision"], now["epoch"]
    statuses = []
    while "SUCCEEDED" not in statuses:
        code, reply = request(cluster, "GET",
                              f"/api/v0/events?since={since}&epoch={epoch}&kind=job&id={job_id}&wait_ms=30000",
                              timeout=40)
        assert code == 200, reply
        assert reply["events"], "a wait of 30 s ended without the job's change"
        statuses += [e["status"] for e in reply["events"]]
        since = reply["revision"]
    assert statuses == ["PENDING", "RUNNING", "SUCCEEDED"]


def test_a_resume_from_another_epoch_is_gone(cluster):
    code, now = request(cluster, "GET", "/api/v0/events/revision")
    assert code == 200
    code, reply = request(cluster, "GET", f"/api/v0/events?since=0&epoch={now['epoch'] + 1}")
    assert code == 410, reply
    assert reply["epoch"] == now["epoch"]
    assert f"the head has restarted since epoch {now['epoch'] + 1}" in reply["error"]


def test_a_job_log_read_waits_for_the_next_output(cluster):
    job_id = submit(cluster, entrypoint="echo first; sleep 1; echo second; sleep 30", submission_id="events-log-wait")
    wait_until(lambda: job(cluster, job_id)["status"] == "RUNNING", 15, message="the job to run")
    code, first = request(cluster, "GET", f"/api/v0/jobs/{job_id}/logs?offset=0&wait_ms=30000", timeout=40)
    assert code == 200, first
    if first["data"] == "":  # it had not written yet
        code, first = request(cluster, "GET", f"/api/v0/jobs/{job_id}/logs?offset=0&wait_ms=30000", timeout=40)
    assert first["data"] == "first\n"
    code, second = request(cluster, "GET", f"/api/v0/jobs/{job_id}/logs?offset=6&wait_ms=30000", timeout=40)
    assert code == 200, second
    assert second == {"data": "second\n", "next_offset": 13, "finished": False, "status": "RUNNING"}
    request(cluster, "POST", f"/api/jobs/{job_id}/stop")


def test_a_job_log_read_of_a_job_that_waits_answers_when_the_wait_ends(cluster):
    job_id = submit(cluster, entrypoint="echo never", submission_id="events-log-pending",
                    entrypoint_label_selector={"torus.io/node-id": "no-such-node"})
    code, reply = request(cluster, "GET", f"/api/v0/jobs/{job_id}/logs?offset=0&wait_ms=200")
    assert code == 200, reply
    assert reply == {"data": "", "next_offset": 0, "finished": False, "status": "PENDING"}
    code, reply = request(cluster, "GET", f"/api/v0/jobs/{job_id}/logs?wait_ms=70000")
    assert code == 400
    assert "wait_ms must be a whole number of milliseconds from 0 to 60000" in reply["error"]
    request(cluster, "POST", f"/api/jobs/{job_id}/stop")


def test_cli_submit_shows_output_while_the_job_still_runs(cluster):
    proc = subprocess.Popen([str(binary("torus")), "job", "submit", "--submission-id", "events-cli-stream", "--",
                             "sh", "-c", "echo first; sleep 2; echo second"],
                            env=cluster.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "first\n"
        assert job(cluster, "events-cli-stream")["status"] == "RUNNING"
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == "second\n"
    assert "events-cli-stream SUCCEEDED" in err


def test_every_ranks_output_in_one_read(cluster, tmp_path):
    result = cluster.run("train", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--storage-path",
                         tmp_path, "--name", "events-ranks", "--", "sh", "-c", "echo rank $TORUS_RANK")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == sorted(f"[rank {r}] rank {r}" for r in range(4))
    code, reply = request(cluster, "GET", "/api/v0/runs/events-ranks/logs?ranks=all")
    assert code == 200, reply
    assert reply["attempt"] == 1
    assert [r["data"] for r in reply["ranks"]] == [f"rank {r}\n" for r in range(4)]
    assert all(r["finished"] for r in reply["ranks"])
    code, reply = request(cluster, "GET", "/api/v0/runs/events-ranks/logs?ranks=all&offsets=5,5,5,7")
    assert code == 200, reply
    assert [r["data"] for r in reply["ranks"]] == ["0\n", "1\n", "2\n", ""]
    code, reply = request(cluster, "GET", "/api/v0/runs/events-ranks/logs?ranks=all&offsets=1,2")
    assert code == 400
    assert reply["error"] == "offsets: give one offset per rank (attempt 1 has 4 ranks), or none"
