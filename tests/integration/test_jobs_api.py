"""The Ray Jobs REST API on the head's HTTP port (semantics §9), spoken as a Ray job client or curl would, and the
`torus job` commands built on it."""

import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import pid_alive, wait_until

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
JOB_DETAILS_FIELDS = {
    "type", "job_id", "submission_id", "driver_info", "status", "entrypoint", "message", "error_type",
    "start_time", "end_time", "metadata", "runtime_env", "driver_agent_http_address", "driver_node_id",
    "driver_exit_code"}
STOP_GRACE_S = 3.0


# HTTP, as curl would send it.

def request(torus, method, path, body=None, token="cluster", raw=None, timeout=10):
    """(status code, parsed JSON or text) of METHOD http://<dashboard><path>. `token="cluster"` sends the
    cluster's token, None sends no Authorization header; `raw` is sent as the body verbatim."""
    address = (torus.session / "dashboard_address").read_text().strip()
    data = raw.encode() if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {torus.token if token == 'cluster' else token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            text, code = response.read().decode(), response.status
    except urllib.error.HTTPError as error:
        text, code = error.read().decode(), error.code
    try:
        return code, json.loads(text)
    except json.JSONDecodeError:
        return code, text


def submit(torus, **fields):
    """POST /api/jobs/ asserted to succeed; returns the submission id."""
    code, reply = request(torus, "POST", "/api/jobs/", fields)
    assert code == 200, reply
    assert reply["job_id"] == reply["submission_id"]
    return reply["submission_id"]


def refused(torus, body=None, raw=None):
    """POST /api/jobs/ asserted to answer 400; returns the text."""
    code, reply = request(torus, "POST", "/api/jobs/", body, raw=raw)
    assert code == 400, reply
    assert isinstance(reply, str), reply
    return reply


def job(torus, job_id):
    code, details = request(torus, "GET", f"/api/jobs/{job_id}")
    assert code == 200, details
    return details


def logs(torus, job_id):
    code, reply = request(torus, "GET", f"/api/jobs/{job_id}/logs")
    assert code == 200, reply
    assert set(reply) == {"logs"}
    return reply["logs"]


def stop(torus, job_id):
    code, reply = request(torus, "POST", f"/api/jobs/{job_id}/stop")
    assert code == 200, reply
    return reply


def wait_for_status(torus, job_id, statuses, timeout=15):
    statuses = (statuses,) if isinstance(statuses, str) else statuses
    return wait_until(lambda: (lambda j: j if j["status"] in statuses else None)(job(torus, job_id)), timeout,
                      message=f"job {job_id} to be {'/'.join(statuses)}")


def finished(torus, job_id, timeout=15):
    return wait_for_status(torus, job_id, TERMINAL, timeout)


def run_job(torus, timeout=15, **fields):
    """Submits a job and waits for it to end; returns (JobDetails, logs)."""
    job_id = submit(torus, **fields)
    details = finished(torus, job_id, timeout)
    return details, logs(torus, job_id)


def now_ms():
    return int(time.time() * 1000)


def lingering(command):
    """command, then a short sleep: tests of what an entrypoint sees read its output, which should not depend on
    how fast it exits (test_quick_job_has_its_output_and_driver_info covers jobs that exit at once)."""
    return f"{command}; sleep 0.5"


# The cluster: examples/clusters/local.yaml (head, 8 v6e hosts of 4 chips, one 8-chip v5e host, 2 v4 hosts,
# cpu-0/1 labelled team=data with 4 CPUs and 8Gi, gpu-0/1 with 2 GPUs and 16Gi; the head host has 4 CPUs, 8Gi).

@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster


# GET /api/version

def test_version_is_4_and_ray_version_at_least_2_8(cluster):
    code, version = request(cluster, "GET", "/api/version")
    assert code == 200
    assert version["version"] == "4"
    numbers = re.match(r"^(\d+)\.(\d+)", version["ray_version"])
    assert numbers, version
    assert (int(numbers[1]), int(numbers[2])) >= (2, 8), version
    assert version["ray_commit"] == "torus"
    assert version["session_name"] == cluster.session.name


# Submission

@pytest.mark.parametrize("path", ["/api/jobs/", "/api/jobs"])
def test_submit_on_both_routes(cluster, path):
    code, reply = request(cluster, "POST", path, {"entrypoint": "echo on both routes"})
    assert code == 200, reply
    assert set(reply) == {"job_id", "submission_id"}
    assert reply["job_id"] == reply["submission_id"]
    assert re.fullmatch(r"raysubmit_[A-Za-z0-9]{16}", reply["submission_id"]), reply
    details = finished(cluster, reply["submission_id"])
    assert details["status"] == "SUCCEEDED", details


def test_submission_id_and_job_id_alias(cluster):
    assert submit(cluster, entrypoint="true", submission_id="jobs-api-explicit-id") == "jobs-api-explicit-id"
    assert submit(cluster, entrypoint="true", job_id="jobs-api-alias-id") == "jobs-api-alias-id"
    assert job(cluster, "jobs-api-alias-id")["submission_id"] == "jobs-api-alias-id"


def test_env_vars_reach_the_entrypoint(cluster):
    details, out = run_job(cluster, entrypoint=lingering('echo "greeting=$GREETING other=$OTHER"'),
                           runtime_env={"env_vars": {"GREETING": "hello world", "OTHER": "x=y"}})
    assert details["status"] == "SUCCEEDED", details
    assert "greeting=hello world other=x=y" in out
    assert details["runtime_env"] == {"env_vars": {"GREETING": "hello world", "OTHER": "x=y"}}


def test_entrypoint_sees_torus_job_id(cluster):
    details, out = run_job(cluster, entrypoint=lingering('echo "id=$TORUS_JOB_ID"'),
                           submission_id="jobs-api-sees-id")
    assert details["status"] == "SUCCEEDED", details
    assert "id=jobs-api-sees-id" in out


def test_working_dir_is_the_cwd(cluster, tmp_path):
    work = tmp_path / "work dir"
    work.mkdir()
    (work / "marker.txt").write_text("found me\n")
    details, out = run_job(cluster, entrypoint=lingering("pwd; cat marker.txt"),
                           runtime_env={"working_dir": str(work)})
    assert details["status"] == "SUCCEEDED", (details, out)
    assert out.splitlines() == [str(work), "found me"]
    assert details["runtime_env"] == {"working_dir": str(work)}


def test_entrypoint_num_gpus_lands_on_a_gpu_host(cluster):
    details, out = run_job(cluster, entrypoint=lingering("echo gpu job"), entrypoint_num_gpus=1)
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"].startswith("gpu-"), details
    assert "gpu job" in out


def test_entrypoint_num_cpus_skips_small_hosts(cluster):
    # Only the 8-CPU hosts (TPU and GPU hosts) have 6 CPUs.
    details, _ = run_job(cluster, entrypoint="true", entrypoint_num_cpus=6)
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] not in ("head", "cpu-0", "cpu-1"), details


def test_entrypoint_resources_lands_where_they_are(cluster):
    # The v5e host is the only one with 8 TPU chips.
    details, _ = run_job(cluster, entrypoint="true", entrypoint_resources={"TPU": 8})
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] == "v5e-0-w0", details


def test_entrypoint_memory_skips_small_hosts(cluster):
    # 12 GiB fits only the 16Gi hosts: not the head host nor cpu-0/1 (8Gi).
    details, _ = run_job(cluster, entrypoint="true", entrypoint_memory=12 * 2**30)
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] not in ("head", "cpu-0", "cpu-1"), details


def test_entrypoint_label_selector_lands_on_a_matching_node(cluster):
    details, _ = run_job(cluster, entrypoint="true", entrypoint_label_selector={"team": "data"})
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] in ("cpu-0", "cpu-1"), details
    details, _ = run_job(cluster, entrypoint="true", entrypoint_num_cpus=1,
                         entrypoint_label_selector={"ray.io/accelerator-type": "TPU-V5LITEPOD"})
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] == "v5e-0-w0", details


def test_job_without_resources_runs_on_the_head_host(cluster):
    details, _ = run_job(cluster, entrypoint="true")
    assert details["driver_node_id"] == "head", details


def test_metadata_is_echoed(cluster):
    job_id = submit(cluster, entrypoint="true", metadata={"owner": "alice", "purpose": "test"})
    assert job(cluster, job_id)["metadata"] == {"owner": "alice", "purpose": "test"}
    assert finished(cluster, job_id)["metadata"] == {"owner": "alice", "purpose": "test"}


def test_nulls_are_ignored(cluster):
    body = {"entrypoint": "echo nulls", "submission_id": None, "job_id": None, "runtime_env": None,
            "metadata": None, "entrypoint_num_cpus": None, "entrypoint_num_gpus": None, "entrypoint_memory": None,
            "entrypoint_resources": None, "entrypoint_label_selector": None}
    code, reply = request(cluster, "POST", "/api/jobs/", body)
    assert code == 200, reply
    assert reply["submission_id"].startswith("raysubmit_")
    details = finished(cluster, reply["submission_id"])
    assert details["status"] == "SUCCEEDED", details
    assert details["driver_node_id"] == "head", details


# Refused submissions

def test_reused_submission_id_is_refused_with_kuberays_text(cluster):
    submit(cluster, entrypoint="true", submission_id="jobs-api-reused")
    text = refused(cluster, {"entrypoint": "true", "submission_id": "jobs-api-reused"})
    assert text == ("Job with submission_id jobs-api-reused already exists. "
                    "Please use a different submission_id.")
    # The alias is the same id.
    text = refused(cluster, {"entrypoint": "true", "job_id": "jobs-api-reused"})
    assert text.startswith("Job with submission_id jobs-api-reused already exists.")


def test_unknown_field_is_refused_by_name(cluster):
    text = refused(cluster, {"entrypoint": "true", "entrypoint_num_cpu": 1})
    assert text == ('unknown field "entrypoint_num_cpu"; accepted: entrypoint, submission_id (or job_id), '
                    'runtime_env, metadata, entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory, '
                    'entrypoint_resources, entrypoint_label_selector')


@pytest.mark.parametrize("body, message", [
    ({"entrypoint": 5}, 'field "entrypoint": expected a string'),
    ({"entrypoint": ["echo", "x"]}, 'field "entrypoint": expected a string'),
    ({"entrypoint": "true", "submission_id": 7}, 'field "submission_id": expected a string'),
    ({"entrypoint": "true", "metadata": {"k": 1}}, 'field "metadata.k": expected a string'),
    ({"entrypoint": "true", "metadata": "owner=alice"}, 'field "metadata": expected an object of strings'),
    ({"entrypoint": "true", "runtime_env": {"env_vars": {"A": 1}}},
     'field "runtime_env.env_vars.A": expected a string'),
    ({"entrypoint": "true", "runtime_env": {"working_dir": 3}},
     'field "runtime_env.working_dir": expected a string: a package uploaded to this head ("gcs://<name>.zip", '
     'see PUT /api/packages/gcs/<name>) or a path on the node'),
    ({"entrypoint": "true", "runtime_env": []}, 'field "runtime_env": expected an object'),
    ({"entrypoint": "true", "entrypoint_num_cpus": "1"}, 'field "entrypoint_num_cpus": expected a number'),
    ({"entrypoint": "true", "entrypoint_num_gpus": True}, 'field "entrypoint_num_gpus": expected a number'),
    ({"entrypoint": "true", "entrypoint_memory": 1.5}, 'field "entrypoint_memory": expected a non-negative integer'),
    ({"entrypoint": "true", "entrypoint_resources": {"special": "2"}},
     'field "entrypoint_resources.special": expected a number'),
    ({"entrypoint": "true", "entrypoint_resources": [1]},
     'field "entrypoint_resources": expected an object of resource name to number'),
    ({"entrypoint": "true", "entrypoint_label_selector": {"team": 1}},
     'field "entrypoint_label_selector.team": expected a string'),
])
def test_wrong_type_is_refused_by_field(cluster, body, message):
    assert refused(cluster, body) == message


def test_missing_entrypoint_is_refused(cluster):
    assert refused(cluster, {"submission_id": "jobs-api-no-entrypoint"}) == 'field "entrypoint" is required'
    code, _ = request(cluster, "GET", "/api/jobs/jobs-api-no-entrypoint")
    assert code == 404


@pytest.mark.parametrize("raw", ["{", "not json", "[]", '"entrypoint"', ""])
def test_bad_json_is_refused(cluster, raw):
    assert refused(cluster, raw=raw) == "request body must be a JSON object"


def test_unsupported_runtime_env_field_is_refused(cluster):
    text = refused(cluster, {"entrypoint": "true", "runtime_env": {"pip": ["requests"]}})
    assert text == 'runtime_env field "pip" is not supported; supported: env_vars, working_dir, py_modules, excludes'


@pytest.mark.parametrize("amount, message", [
    (3, "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"),
    (0.5, "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; "
          "use 1, 2, 4 or 8 chips, or a whole host"),
    (16, "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"),
])
def test_unsupported_tpu_amount_is_refused(cluster, amount, message):
    text = refused(cluster, {"entrypoint": "true", "submission_id": f"jobs-api-tpu-{amount}",
                             "entrypoint_resources": {"TPU": amount}})
    assert message in text
    code, _ = request(cluster, "GET", f"/api/jobs/jobs-api-tpu-{amount}")
    assert code == 404, "a refused submission is not queued"


# JobDetails and statuses

def test_list_holds_job_details_with_every_field(cluster):
    before = now_ms()
    job_id = submit(cluster, entrypoint=lingering("echo listed"), submission_id="jobs-api-listed",
                    metadata={"k": "v"}, runtime_env={"env_vars": {"A": "b"}})
    finished(cluster, job_id)
    code, jobs = request(cluster, "GET", "/api/jobs/")
    assert code == 200 and isinstance(jobs, list)
    code, same = request(cluster, "GET", "/api/jobs")
    assert code == 200 and [j["submission_id"] for j in same] == [j["submission_id"] for j in jobs]
    mine = [j for j in jobs if j["submission_id"] == job_id]
    assert len(mine) == 1
    details = mine[0]
    assert JOB_DETAILS_FIELDS <= set(details), JOB_DETAILS_FIELDS - set(details)
    assert details["type"] == "SUBMISSION"
    assert details["job_id"] == details["submission_id"] == job_id
    assert details["status"] == "SUCCEEDED"
    assert details["entrypoint"] == lingering("echo listed")
    assert isinstance(details["message"], str) and details["message"]
    assert details["error_type"] is None
    assert before <= details["start_time"] <= details["end_time"] <= now_ms()
    assert details["metadata"] == {"k": "v"}
    assert details["runtime_env"] == {"env_vars": {"A": "b"}}
    assert details["driver_agent_http_address"] is None  # no per-node job agent: drivers are the head's workers
    assert details["driver_node_id"] == "head"
    assert details["driver_exit_code"] == 0
    driver = details["driver_info"]
    assert set(driver) == {"id", "node_ip_address", "pid"}, driver
    assert isinstance(driver["id"], str) and driver["id"]
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", driver["node_ip_address"]), driver
    assert int(driver["pid"]) > 0
    for other in jobs:
        assert JOB_DETAILS_FIELDS <= set(other), other
        assert other["type"] == "SUBMISSION"


def test_unknown_job_is_404(cluster):
    for method, path in [("GET", "/api/jobs/no-such-job"), ("GET", "/api/jobs/no-such-job/logs"),
                         ("POST", "/api/jobs/no-such-job/stop"), ("DELETE", "/api/jobs/no-such-job")]:
        code, text = request(cluster, method, path)
        assert (code, text) == (404, "Job no-such-job does not exist"), (method, path)


def test_statuses_pending_running_succeeded(cluster):
    # The v5e host is the only one with 8 chips: while one job holds them, the next waits.
    holder = submit(cluster, entrypoint="sleep 60", entrypoint_resources={"TPU": 8})
    wait_for_status(cluster, holder, "RUNNING")
    waiter = submit(cluster, entrypoint="sleep 1; echo waited", entrypoint_resources={"TPU": 8})
    seen = [job(cluster, waiter)]
    time.sleep(0.5)
    seen.append(job(cluster, waiter))
    assert [d["status"] for d in seen] == ["PENDING", "PENDING"], seen
    pending = seen[-1]
    assert pending["driver_info"] is None and pending["start_time"] is None and pending["end_time"] is None
    assert pending["driver_exit_code"] is None
    assert pending["message"], pending
    assert logs(cluster, waiter) == ""

    assert stop(cluster, holder) == {"stopped": True}
    statuses = []
    def ended():
        details = job(cluster, waiter)
        if not statuses or statuses[-1] != details["status"]:
            statuses.append(details["status"])
        return details["status"] in TERMINAL
    wait_until(ended, 15, interval=0.02, message="the waiting job to end")
    assert statuses == ["PENDING", "RUNNING", "SUCCEEDED"] or statuses == ["RUNNING", "SUCCEEDED"], statuses
    assert "RUNNING" in statuses
    details = job(cluster, waiter)
    assert details["driver_node_id"] == "v5e-0-w0"
    assert details["driver_exit_code"] == 0
    assert "waited" in logs(cluster, waiter)


def test_failing_command_is_failed_with_exit_code(cluster):
    details, out = run_job(cluster, entrypoint="echo about to fail; sleep 0.5; exit 3")
    assert details["status"] == "FAILED", details
    assert details["driver_exit_code"] == 3
    assert "exit code 3" in details["message"], details
    assert details["error_type"], details
    assert details["end_time"] >= details["start_time"]
    assert "about to fail" in out


def test_logs_hold_stdout_and_stderr(cluster):
    details, out = run_job(cluster, entrypoint=lingering("echo to-stdout; echo to-stderr >&2; printf 'no newline'"))
    assert details["status"] == "SUCCEEDED", details
    assert "to-stdout\n" in out and "to-stderr\n" in out and out.endswith("no newline")


def test_quick_job_has_its_output_and_driver_info(cluster):
    # A job that exits at once goes through RUNNING like any other: it has a driver, a start time and its output,
    # every time, however its exit and its launch race to the head. One at a time, then all at once.
    def assert_complete(i, job_id):
        details = finished(cluster, job_id)
        assert details["status"] == "SUCCEEDED", details
        assert details["driver_info"] is not None, (i, details)
        assert details["start_time"] is not None, (i, details)
        assert details["start_time"] <= details["end_time"], (i, details)
        assert logs(cluster, job_id) == f"quick-{i}\n", (i, details)
    for i in range(30):
        assert_complete(i, submit(cluster, entrypoint=f"echo quick-{i}"))
    burst = [submit(cluster, entrypoint=f"echo quick-{i}") for i in range(30)]
    for i, job_id in enumerate(burst):
        assert_complete(i, job_id)


def test_logs_while_running(cluster):
    job_id = submit(cluster, entrypoint="echo started; sleep 60")
    wait_until(lambda: "started" in logs(cluster, job_id), 10, message="the first line")
    assert job(cluster, job_id)["status"] == "RUNNING"
    assert stop(cluster, job_id) == {"stopped": True}
    finished(cluster, job_id)


# Stop and delete

def test_stop_of_sleeping_job(cluster):
    job_id = submit(cluster, entrypoint="sleep 60")
    running = wait_for_status(cluster, job_id, "RUNNING")
    pid = int(running["driver_info"]["pid"])
    assert pid_alive(pid)
    asked = time.monotonic()
    assert stop(cluster, job_id) == {"stopped": True}
    details = finished(cluster, job_id, timeout=4)
    elapsed = time.monotonic() - asked
    assert details["status"] == "STOPPED", details
    assert elapsed < STOP_GRACE_S, f"a job that obeys SIGTERM took {elapsed:.1f} s to stop"
    assert details["end_time"] is not None
    wait_until(lambda: not pid_alive(pid), 2, message="the entrypoint to be gone")
    assert stop(cluster, job_id) == {"stopped": False}
    assert job(cluster, job_id)["status"] == "STOPPED"


def test_stop_without_a_body_as_curl_sends_it(cluster):
    """`curl -X POST .../stop` sends neither a body nor Content-Length: the head answers at once, as Ray's does."""
    job_id = submit(cluster, entrypoint="sleep 60")
    wait_for_status(cluster, job_id, "RUNNING")
    host, port = (cluster.session / "dashboard_address").read_text().strip().rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=3) as s:
        s.sendall(f"POST /api/jobs/{job_id}/stop HTTP/1.1\r\nHost: {host}\r\n"
                  f"Authorization: Bearer {cluster.token}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)  # the head must not wait for a body the client never sends (timeout: 3 s)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200"), reply
    assert json.loads(body) == {"stopped": True}
    assert finished(cluster, job_id)["status"] == "STOPPED"


def test_a_large_body_labelled_as_a_form_is_read_as_json_as_curl_d_sends_it(cluster):
    """`curl -d '{...}'` labels its body application/x-www-form-urlencoded; over 8 KiB the HTTP library would refuse
    it (413). The head reads it as JSON, as Ray's does."""
    address = (cluster.session / "dashboard_address").read_text().strip()
    body = json.dumps({"entrypoint": "true", "metadata": {"note": "x" * 20_000}}).encode()
    req = urllib.request.Request(f"http://{address}/api/jobs/", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {cluster.token}",
                                          "Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(req, timeout=10) as response:
        reply = json.loads(response.read())
    assert job(cluster, reply["submission_id"])["metadata"] == {"note": "x" * 20_000}


def test_an_unreadable_request_is_refused_saying_why(cluster):
    host, port = (cluster.session / "dashboard_address").read_text().strip().rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET /api/jobs/ HTTP/1.1\r\nHost: {host}\r\nX-Long: {'b' * 10_000}\r\n\r\n".encode())
        reply = b""
        while not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 400"), reply
    assert "a header line over 8192 bytes" in json.loads(body)["error"], body


def test_stop_kills_a_job_that_ignores_sigterm(cluster):
    job_id = submit(cluster, entrypoint="trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.1; done")
    wait_until(lambda: "ready" in logs(cluster, job_id), 10, message="the trap to be set")
    asked = time.monotonic()
    assert stop(cluster, job_id) == {"stopped": True}
    details = finished(cluster, job_id, timeout=STOP_GRACE_S + 2)
    elapsed = time.monotonic() - asked
    assert details["status"] == "STOPPED", details
    assert STOP_GRACE_S - 0.5 <= elapsed <= STOP_GRACE_S + 1.5, f"stopped after {elapsed:.1f} s"
    assert "got TERM" in logs(cluster, job_id)
    assert stop(cluster, job_id) == {"stopped": False}


def test_stop_of_pending_job(cluster):
    job_id = submit(cluster, entrypoint="true", entrypoint_resources={"no_such_resource": 1})
    time.sleep(0.3)
    assert job(cluster, job_id)["status"] == "PENDING"
    assert stop(cluster, job_id) == {"stopped": True}
    details = job(cluster, job_id)
    assert details["status"] == "STOPPED", details
    assert details["driver_info"] is None
    assert stop(cluster, job_id) == {"stopped": False}


def test_stop_of_ended_job_is_false(cluster):
    details, _ = run_job(cluster, entrypoint="true")
    assert stop(cluster, details["submission_id"]) == {"stopped": False}
    assert job(cluster, details["submission_id"])["status"] == "SUCCEEDED"


def test_delete_only_ended_jobs(cluster):
    job_id = submit(cluster, entrypoint="sleep 60")
    wait_for_status(cluster, job_id, "RUNNING")
    code, text = request(cluster, "DELETE", f"/api/jobs/{job_id}")
    assert code == 400, text
    assert job(cluster, job_id)["status"] == "RUNNING"
    stop(cluster, job_id)
    finished(cluster, job_id)
    code, reply = request(cluster, "DELETE", f"/api/jobs/{job_id}")
    assert (code, reply) == (200, {"deleted": True})
    code, text = request(cluster, "GET", f"/api/jobs/{job_id}")
    assert (code, text) == (404, f"Job {job_id} does not exist")
    code, jobs = request(cluster, "GET", "/api/jobs/")
    assert job_id not in [j["submission_id"] for j in jobs]
    # The id is free again.
    assert submit(cluster, entrypoint="true", submission_id=job_id) == job_id


# Authentication

@pytest.mark.parametrize("method, path, body", [
    ("GET", "/api/version", None),
    ("GET", "/api/jobs/", None),
    ("POST", "/api/jobs/", {"entrypoint": "echo should not run"}),
    ("GET", "/api/jobs/any", None),
    ("GET", "/api/jobs/any/logs", None),
    ("GET", "/api/jobs/any/logs/tail", None),
    ("POST", "/api/jobs/any/stop", None),
    ("DELETE", "/api/jobs/any", None),
])
def test_missing_or_wrong_token_is_401(cluster, method, path, body):
    code, _ = request(cluster, method, path, body, token=None)
    assert code == 401
    code, _ = request(cluster, method, path, body, token="not-the-token")
    assert code == 401
    code, jobs = request(cluster, "GET", "/api/jobs/")
    assert "echo should not run" not in [j["entrypoint"] for j in jobs]


# The CLI

def test_cli_submit_waits_and_prints_output(cluster):
    # Every time: a command that exits at once must not lose its output.
    for _ in range(8):
        result = cluster.run("job", "submit", "--", "sh", "-c", "echo hi; exit 0")
        assert result.returncode == 0, result.stderr
        assert result.stdout == "hi\n", result.stderr
        assert "SUCCEEDED" in result.stderr


def test_cli_submit_of_failing_command_exits_1(cluster):
    result = cluster.run("job", "submit", "--", "sh", "-c", "echo failing; sleep 0.5; exit 4")
    assert result.returncode == 1, result.stderr
    assert "failing" in result.stdout
    assert "FAILED" in result.stderr


def test_cli_submit_passes_env_working_dir_and_resources(cluster, tmp_path):
    (tmp_path / "marker.txt").write_text("from the uploaded copy")
    result = cluster.run("job", "submit", "--env", "COLOUR=blue", "--working-dir", tmp_path,
                         "--resources", '{"GPU": 1}', "--submission-id", "jobs-api-cli-flags",
                         "--", "sh", "-c", 'echo "$COLOUR $(cat marker.txt) $(basename $(dirname $(pwd)))"; sleep 0.5')
    assert result.returncode == 0, result.stderr
    assert result.stdout == "blue from the uploaded copy packages\n"
    details = job(cluster, "jobs-api-cli-flags")
    assert details["driver_node_id"].startswith("gpu-")
    assert details["runtime_env"]["working_dir"].startswith("gcs://_torus_pkg_")


def test_cli_job_commands(cluster):
    submitted = cluster.run("job", "submit", "--no-wait", "--", "sh", "-c", "echo cli-line; sleep 60")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"raysubmit_[A-Za-z0-9]{16}", job_id), submitted.stdout
    wait_for_status(cluster, job_id, "RUNNING")

    status = cluster.ok("job", "status", job_id)
    assert job_id in status.stdout and "RUNNING" in status.stdout
    details = json.loads(cluster.ok("job", "status", job_id, "--json").stdout)
    assert details["submission_id"] == job_id and details["status"] == "RUNNING"

    wait_until(lambda: "cli-line" in cluster.ok("job", "logs", job_id).stdout, 10, message="the job's output")
    listed = cluster.ok("job", "list").stdout
    assert any(line.startswith(job_id) and "RUNNING" in line for line in listed.splitlines()), listed
    listed = json.loads(cluster.ok("job", "list", "--json").stdout)
    assert job_id in [j["submission_id"] for j in listed]

    deleting_running = cluster.run("job", "delete", job_id)
    assert deleting_running.returncode != 0
    assert job(cluster, job_id)["status"] == "RUNNING"

    cluster.ok("job", "stop", job_id)
    assert finished(cluster, job_id)["status"] == "STOPPED"
    again = cluster.ok("job", "stop", job_id)
    assert "already" in again.stdout
    cluster.ok("job", "delete", job_id)
    code, _ = request(cluster, "GET", f"/api/jobs/{job_id}")
    assert code == 404
    missing = cluster.run("job", "status", job_id)
    assert missing.returncode != 0
    assert f"Job {job_id} does not exist" in missing.stderr


def test_tpu_jobs_on_one_host_see_distinct_aligned_chip_blocks(cluster):
    """Two 4-chip jobs on the 8-chip v5e host each get their own block, with the bounds of tpu.md §4."""
    pin = {"torus.io/node-id": "v5e-0-w0"}
    show = "env | grep -E '^TPU_(VISIBLE_CHIPS|CHIPS_PER_HOST_BOUNDS|HOST_BOUNDS|WORKER_ID)=' | sort; sleep 2"
    first = submit(cluster, entrypoint=show, entrypoint_resources={"TPU": 4}, entrypoint_label_selector=pin)
    second = submit(cluster, entrypoint=show, entrypoint_resources={"TPU": 4}, entrypoint_label_selector=pin)
    outputs = []
    for job_id in (first, second):
        assert finished(cluster, job_id, 20)["status"] == "SUCCEEDED"
        outputs.append(dict(line.split("=", 1) for line in logs(cluster, job_id).split()))
    assert sorted(o["TPU_VISIBLE_CHIPS"] for o in outputs) == ["0,1,2,3", "4,5,6,7"]
    for o in outputs:
        assert o["TPU_CHIPS_PER_HOST_BOUNDS"] == "2,2,1"
        assert o["TPU_HOST_BOUNDS"] == "1,1,1"
        assert o["TPU_WORKER_ID"] == "0"
