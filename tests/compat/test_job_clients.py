"""Ray's own job clients — the venv's `ray job` CLI and ray.job_submission.JobSubmissionClient — and
torus.job_submission, against a torus head's Jobs API: submit, status, logs (whole and followed), stop, list and
delete, with the cluster token, and over TLS.

A pytest file of its own beside the differential suite: a torus head (`torus start --head`, ephemeral ports, a temp
TORUS_TEMP_DIR) per module, and one with --tls. The values asserted are Ray's shapes and words; where torus answers
a refusal differently from a Ray head on purpose (400 instead of Ray's 500 for a reused id or the delete of a running
job; a one-line reason instead of a traceback), the test says so.
"""

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import BUILD, VENV

_LEAKY = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_JOB_HEADERS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN",
          "RAY_AUTH_TOKEN_PATH", "TORUS_ADDRESS", "TORUS_TOKEN", "TORUS_TEMP_DIR", "TORUS_DASHBOARD_ADDRESS",
          "TORUS_TLS_CA", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "PYTHONPATH")
PIP_REFUSED = 'runtime_env field "pip" is not supported; supported: env_vars, working_dir, py_modules, excludes'


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    env.update(RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


class Head:
    """`torus start --head` in its own TORUS_TEMP_DIR; stop() ends what it started."""

    def __init__(self, root, *flags):
        self.root = Path(root)
        self.env = clean_env(TORUS_TEMP_DIR=str(self.root))
        done = subprocess.run([str(BUILD / "bin" / "torus"), "start", "--head", "--port", "0", "--dashboard-port", "0",
                               *flags], env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        session = (self.root / "session_latest").resolve()
        self.token = (session / "token").read_text().strip()
        ca = session / "ca.crt"
        self.ca = str(ca) if ca.exists() else None
        self.url = f"{'https' if self.ca else 'http'}://{(session / 'dashboard_address').read_text().strip()}"
        self.auth = {"Authorization": f"Bearer {self.token}"}
        self.processes = session / "processes"

    def stop(self):
        try:
            subprocess.run([str(BUILD / "bin" / "torus"), "stop"], env=self.env, capture_output=True, timeout=60)
        finally:
            for line in self.processes.read_text().splitlines():
                pid = int(line.split()[2])
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().startswith("torus"):
                            os.kill(pid, signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    h = Head(tmp_path_factory.mktemp("torus"))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def tls_head(tmp_path_factory):
    h = Head(tmp_path_factory.mktemp("torus-tls"), "--tls")
    yield h
    h.stop()


@pytest.fixture(autouse=True)
def no_leaks(monkeypatch):
    for name in _LEAKY:
        monkeypatch.delenv(name, raising=False)


def ray_job(head, command, *args, headers=True, env=None):
    """`ray job COMMAND --address URL [--headers TOKEN] ARGS` from the venv, plain output; the CompletedProcess."""
    argv = [str(VENV / "bin" / "ray"), "job", command, "--log-style", "pretty", "--log-color", "false",
            "--address", head.url]
    if headers:
        argv += ["--headers", json.dumps(head.auth)]
    return subprocess.run(argv + list(args), env=clean_env(**(env or {})), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def wait_status(client, job_id, *statuses, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        status = str(client.get_job_status(job_id))
        if status in statuses:
            return status
        assert time.monotonic() < deadline, f"{job_id} is {status}, not {statuses}"
        time.sleep(0.05)


def followed(client, job_id):
    async def collect():
        return [chunk async for chunk in client.tail_job_logs(job_id)]
    return "".join(asyncio.run(collect()))


def raw_post(head, body):
    req = urllib.request.Request(head.url + "/api/jobs/", data=body.encode(), method="POST",
                                 headers=dict(head.auth, **{"Content-Type": "application/json"}))
    try:
        with urllib.request.urlopen(req, timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


# Ray's CLI.

def test_ray_cli_submit_status_logs_stop_list_delete(head):
    out = ok(ray_job(head, "submit", "--submission-id", "cli-1", "--metadata-json", '{"owner": "cli"}',
                     "--runtime-env-json", '{"env_vars": {"GREETING": "hello"}}', "--entrypoint-num-cpus", "0.5",
                     "--", "sh", "-c", 'echo "$GREETING"; echo to-stderr >&2'))
    assert "Job 'cli-1' submitted successfully" in out
    assert "hello\nto-stderr\n" in out  # followed over the WebSocket until the job ended
    assert "Job 'cli-1' succeeded" in out

    assert "Job 'cli-1' succeeded" in ok(ray_job(head, "status", "cli-1"))
    logs = ok(ray_job(head, "logs", "cli-1"))
    assert logs.split("\n", 1)[1] == "hello\nto-stderr\n"  # after "Job submission server address: ..."

    ok(ray_job(head, "submit", "--no-wait", "--submission-id", "cli-2", "--", "sleep", "60"))
    stopped = ok(ray_job(head, "stop", "cli-2"))
    assert "Attempting to stop job 'cli-2'" in stopped and "Job 'cli-2' was stopped" in stopped

    listed = ok(ray_job(head, "list"))
    assert "submission_id='cli-1'" in listed and "status=<JobStatus.SUCCEEDED: 'SUCCEEDED'>" in listed
    assert "submission_id='cli-2'" in listed and "status=<JobStatus.STOPPED: 'STOPPED'>" in listed
    assert "metadata={'owner': 'cli'}" in listed and "runtime_env={'env_vars': {'GREETING': 'hello'}}" in listed

    assert "Job 'cli-2' deleted successfully" in ok(ray_job(head, "delete", "cli-2"))
    gone = ray_job(head, "status", "cli-2")
    assert gone.returncode == 1
    assert "RuntimeError: Request failed with status code 404: Job cli-2 does not exist." in gone.stderr


def test_ray_cli_takes_the_token_from_ray_job_headers_and_rays_token_variables(head):
    # RAY_JOB_HEADERS: what --headers is when it is not given.
    out = ok(ray_job(head, "submit", "--submission-id", "cli-env", "--", "echo", "from-env", headers=False,
                     env={"RAY_JOB_HEADERS": json.dumps(head.auth)}))
    assert "from-env\n" in out and "Job 'cli-env' succeeded" in out
    # Ray's own token authentication: its client sends RAY_AUTH_TOKEN as the bearer token.
    logs = ok(ray_job(head, "logs", "cli-env", headers=False, env={"RAY_AUTH_MODE": "token",
                                                                    "RAY_AUTH_TOKEN": head.token}))
    assert logs.split("\n", 1)[1] == "from-env\n"
    # Without it the head refuses, and Ray's client says why.
    refused = ray_job(head, "list", headers=False)
    assert refused.returncode == 1
    assert "ray.exceptions.AuthenticationError: Authentication required:" in refused.stderr
    assert "missing cluster token" in refused.stderr


# Ray's SDK (the real one, from the venv).

def test_ray_sdk_submit_follow_stop_delete_and_list(head, tmp_path):
    from ray.job_submission import DriverInfo, JobStatus, JobSubmissionClient, JobType
    client = JobSubmissionClient(head.url, headers=head.auth)
    assert client.get_version() == "4"
    work = tmp_path / "proj"
    work.mkdir()
    (work / "main.py").write_text("import os\nprint('main', os.environ['GREETING'])\n")

    job = client.submit_job(entrypoint="python3 main.py", submission_id="sdk-1", metadata={"owner": "sdk"},
                            runtime_env={"working_dir": str(work), "env_vars": {"GREETING": "hi"}},
                            entrypoint_num_cpus=0.5, entrypoint_memory=2**20, entrypoint_resources={"CPU": 0.5})
    assert job == "sdk-1"
    assert followed(client, job) == "main hi\n"
    info = client.get_job_info(job)
    assert info.type == JobType.SUBMISSION and info.job_id == "sdk-1" and info.submission_id == "sdk-1"
    assert info.status == JobStatus.SUCCEEDED and info.message == "Job finished successfully."
    assert info.error_type is None and info.driver_exit_code == 0
    assert info.entrypoint == "python3 main.py" and info.metadata == {"owner": "sdk"}
    assert info.runtime_env["env_vars"] == {"GREETING": "hi"}
    assert info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")  # uploaded by Ray's client
    assert isinstance(info.driver_info, DriverInfo) and info.driver_info.pid.isdigit()
    assert 0 < info.start_time <= info.end_time
    assert client.get_job_status(job) == JobStatus.SUCCEEDED
    assert client.get_job_logs(job) == "main hi\n"

    sleeper = client.submit_job(entrypoint="sleep 60", submission_id="sdk-2")
    wait_status(client, sleeper, "RUNNING")
    with pytest.raises(RuntimeError) as e:
        client.delete_job(sleeper)
    assert str(e.value) == ("Request failed with status code 400: Attempted to delete job 'sdk-2', but it is in a "
                            "non-terminal state RUNNING..")  # Ray's words (a Ray head's code is 500)
    assert client.stop_job(sleeper) is True
    wait_status(client, sleeper, "STOPPED")
    assert client.get_job_info(sleeper).message == "Job was intentionally stopped."
    assert client.get_job_info(sleeper).driver_exit_code is None
    assert client.stop_job(sleeper) is False
    listed = {j.submission_id: j.status for j in client.list_jobs()}
    assert (listed["sdk-1"], listed["sdk-2"]) == (JobStatus.SUCCEEDED, JobStatus.STOPPED)
    assert client.delete_job(sleeper) is True
    with pytest.raises(RuntimeError) as e:
        client.get_job_info(sleeper)
    assert str(e.value) == "Request failed with status code 404: Job sdk-2 does not exist."


def test_ray_sdk_gets_rays_errors(head):
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient
    client = JobSubmissionClient(head.url, headers=head.auth)
    client.submit_job(entrypoint="true", submission_id="sdk-dup")
    with pytest.raises(RuntimeError) as e:
        client.submit_job(entrypoint="true", submission_id="sdk-dup")
    assert str(e.value) == ("Request failed with status code 400: Job with submission_id sdk-dup already exists. "
                            "Please use a different submission_id..")
    # Ray's client sends pip with its own _ray_commit beside it: the refusal names pip.
    with pytest.raises(RuntimeError) as e:
        client.submit_job(entrypoint="true", runtime_env={"pip": ["requests"]})
    assert str(e.value) == f"Request failed with status code 400: {PIP_REFUSED}."
    for call in (client.get_job_info, client.get_job_logs, client.stop_job, client.delete_job):
        with pytest.raises(RuntimeError) as e:
            call("no-such-job")
        assert str(e.value) == "Request failed with status code 404: Job no-such-job does not exist."
    with pytest.raises(AuthenticationError) as e:
        JobSubmissionClient(head.url)
    assert e.value.message.startswith("Authentication required: ") and "missing cluster token" in e.value.message
    # A bad body gets 400 with a plain-text reason, as Ray's job server answers (Ray's is its traceback).
    assert raw_post(head, '{"entrypoint": 3}') == (400, "text/plain", 'field "entrypoint": expected a string')
    assert raw_post(head, '{"entrypoint": "x", "foo": 1}') == (
        400, "text/plain", 'unknown field "foo"; accepted: entrypoint, submission_id (or job_id), runtime_env, '
                           'metadata, entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory, '
                           'entrypoint_resources, entrypoint_label_selector')


# torus.job_submission: the same answers as Ray's client.

def test_torus_client_answers_as_rays_client(head, tmp_path, monkeypatch):
    from ray.job_submission import JobSubmissionClient as RayClient
    from torus.job_submission import JobDetails, JobStatus, JobSubmissionClient, JobType
    monkeypatch.setenv("TORUS_TEMP_DIR", str(head.root))
    client = JobSubmissionClient()  # this machine's session: its dashboard address and its token
    ray_client = RayClient(head.url, headers=head.auth)
    assert client.get_address() == head.url and client.get_version() == "4"
    work = tmp_path / "proj"
    (work / "skipped").mkdir(parents=True)
    (work / "main.py").write_text("import os\nprint(sorted(os.listdir('.')), os.environ['GREETING'])\n")
    (work / "skipped" / "big.bin").write_bytes(b"x" * 10)

    job = client.submit_job(entrypoint="python3 main.py", metadata={"owner": "torus"},
                            runtime_env={"working_dir": str(work), "env_vars": {"GREETING": "hi"},
                                         "excludes": ["skipped/"]}, entrypoint_num_cpus=0.5)
    assert job.startswith("raysubmit_")
    assert followed(client, job) == "['main.py'] hi\n"
    info = client.get_job_info(job)
    assert isinstance(info, JobDetails) and info.type is JobType.SUBMISSION and info.status is JobStatus.SUCCEEDED
    assert info.runtime_env["working_dir"].startswith("gcs://_torus_pkg_")
    assert info.metadata == {"owner": "torus"} and info.message == "Job finished successfully."
    assert json.loads(info.model_dump_json()) == json.loads(ray_client.get_job_info(job).model_dump_json())
    assert client.get_job_logs(job) == ray_client.get_job_logs(job) == "['main.py'] hi\n"
    assert client.get_job_status(job) is JobStatus.SUCCEEDED and str(client.get_job_status(job)) == "SUCCEEDED"

    sleeper = client.submit_job(entrypoint="sleep 60")
    wait_status(client, sleeper, "RUNNING")
    errors = []
    for c in (client, ray_client):
        with pytest.raises(RuntimeError) as e:
            c.delete_job(sleeper)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert client.stop_job(sleeper) is True
    wait_status(client, sleeper, "STOPPED")
    assert client.stop_job(sleeper) is False
    mine = sorted((json.loads(j.model_dump_json()) for j in client.list_jobs()), key=lambda j: j["submission_id"])
    theirs = sorted((json.loads(j.model_dump_json()) for j in ray_client.list_jobs()), key=lambda j: j["submission_id"])
    assert mine == theirs and {job, sleeper} <= {j["submission_id"] for j in mine}
    assert client.delete_job(sleeper) is True

    for call in ("get_job_info", "get_job_logs", "stop_job", "delete_job"):
        errors = []
        for c in (client, ray_client):
            with pytest.raises(RuntimeError) as e:
                getattr(c, call)(sleeper)
            errors.append(str(e.value))
        assert errors == [f"Request failed with status code 404: Job {sleeper} does not exist."] * 2
    with pytest.raises(RuntimeError) as e:
        client.submit_job(entrypoint="true", submission_id=job)
    assert str(e.value) == (f"Request failed with status code 400: Job with submission_id {job} already exists. "
                            f"Please use a different submission_id..")
    with pytest.raises(RuntimeError) as e:
        client.submit_job(entrypoint="true", runtime_env={"pip": ["requests"]})
    assert str(e.value) == f"Request failed with status code 400: {PIP_REFUSED}."
    with pytest.raises(RuntimeError) as e:
        asyncio.run(asyncio.wait_for(followed_async(client, "no-such-job"), 30))
    assert str(e.value) == "Request failed with status code 404: Job no-such-job does not exist."


def test_torus_client_packs_a_directory_as_the_torus_cli_does(head, tmp_path, monkeypatch):
    """The same tree gets the same package name from `torus job submit --working-dir` and from this client:
    .gitignore files and excludes, nested directories, an executable and a symlink."""
    from torus.job_submission import JobSubmissionClient
    tree = tmp_path / "tree"
    (tree / "pkg" / "sub").mkdir(parents=True)
    (tree / "data").mkdir()
    (tree / ".git").mkdir()
    (tree / "main.py").write_text("print('packed')\n")
    (tree / "pkg" / "sub" / "m.py").write_text("X = 1\n")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("main.py")
    (tree / ".gitignore").write_text("*.log\n!keep.log\n")
    (tree / "pkg" / "a.log").write_text("no\n")
    (tree / "keep.log").write_text("yes\n")
    (tree / "data" / "big.bin").write_bytes(b"0" * 100)
    (tree / ".git" / "HEAD").write_text("ref\n")
    cli = subprocess.run([str(BUILD / "bin" / "torus"), "job", "submit", "--working-dir", str(tree), "--exclude",
                          "data/", "--", "true"], env=head.env, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    uri = next(w.strip("()") for w in cli.stdout.split() + cli.stderr.split() if w.startswith("(gcs://"))
    monkeypatch.setenv("TORUS_TEMP_DIR", str(head.root))
    client = JobSubmissionClient()
    job = client.submit_job(entrypoint="ls -A; cat keep.log",
                            runtime_env={"working_dir": str(tree), "excludes": ["data/"]})
    wait_status(client, job, "SUCCEEDED", "FAILED")
    assert client.get_job_info(job).runtime_env["working_dir"] == uri
    assert client.get_job_logs(job) == ".gitignore\nkeep.log\nlink\nmain.py\npkg\nrun.sh\nyes\n"


def test_torus_models_behave_as_rays():
    import ray.job_submission as ray_js
    import torus.job_submission as torus_js
    assert torus_js.__all__ == ray_js.__all__
    for fields in (dict(status="PENDING", entrypoint="x", entrypoint_num_cpus=1, runtime_env={"pip": ["a"]}),
                   dict(status="FAILED", entrypoint="x", error_type="JOB_ENTRYPOINT_COMMAND_ERROR", end_time=9),
                   dict(status="STOPPED", entrypoint="y", metadata={"k": "v"}, message="told")):
        theirs = ray_js.JobInfo(**dict(fields, error_type=ray_js.JobErrorType(fields["error_type"]))
                                if "error_type" in fields else fields)
        mine = torus_js.JobInfo(**dict(fields, error_type=torus_js.JobErrorType(fields["error_type"]))
                                if "error_type" in fields else fields)
        assert (mine.message, mine.to_json()) == (theirs.message, theirs.to_json())
        assert torus_js.JobInfo.from_json(mine.to_json()) == mine
    details = dict(type="SUBMISSION", status="RUNNING", entrypoint="x", start_time=5, metadata={"a": "b"},
                   driver_info={"id": "d", "node_ip_address": "10.0.0.1", "pid": "42"}, unknown_key=1)
    theirs, mine = ray_js.JobDetails(**details), torus_js.JobDetails(**details)
    assert (repr(mine), str(mine)) == (repr(theirs), str(theirs))
    assert json.loads(mine.model_dump_json()) == json.loads(theirs.model_dump_json())
    assert mine == torus_js.JobDetails(**json.loads(mine.model_dump_json()))
    assert str(torus_js.JobStatus.RUNNING) == str(ray_js.JobStatus.RUNNING) == "RUNNING"
    assert torus_js.JobStatus.STOPPED.is_terminal() and not torus_js.JobStatus.PENDING.is_terminal()
    for bad in (dict(type="SUBMISSION", entrypoint="x"), dict(type="SUBMISSION", status="DONE", entrypoint="x")):
        with pytest.raises(ValueError):
            ray_js.JobDetails(**bad)
        with pytest.raises(ValueError, match="^1 validation error for JobDetails\nstatus\n"):
            torus_js.JobDetails(**bad)


async def followed_async(client, job_id):
    return [chunk async for chunk in client.tail_job_logs(job_id)]


def test_torus_client_token_rules(head, monkeypatch, tmp_path):
    from torus.exceptions import AuthenticationError
    from torus.job_submission import JobSubmissionClient
    monkeypatch.setenv("TORUS_TEMP_DIR", str(tmp_path / "elsewhere"))  # no session here
    with pytest.raises(AuthenticationError) as e:
        JobSubmissionClient(head.url)  # no token is known for it
    assert e.value.message.startswith("Authentication required: ") and "missing cluster token" in e.value.message
    job = JobSubmissionClient(head.url, headers=head.auth).submit_job(entrypoint="true")
    monkeypatch.setenv("TORUS_TOKEN", head.token)
    assert job in {j.submission_id for j in JobSubmissionClient(head.url).list_jobs()}
    monkeypatch.setenv("RAY_ADDRESS", head.url)  # overrides the argument, as in Ray
    assert JobSubmissionClient("http://127.0.0.1:1").get_address() == head.url
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(ConnectionError) as e:
        JobSubmissionClient()
    assert str(e.value).startswith("Could not find any running Ray instance.")
    with pytest.raises(ValueError, match="Ray Client addresses"):
        JobSubmissionClient("ray://127.0.0.1:10001")
    with pytest.raises(TypeError, match="^headers must be a dict, got <class 'list'>$"):
        JobSubmissionClient(head.url, headers=[])


# TLS: Ray's clients given the cluster CA, and torus's finding it in the session.

def test_tls_head_with_rays_cli_and_sdk_and_torus_client(tls_head, monkeypatch):
    from ray.job_submission import JobSubmissionClient as RayClient
    from torus.job_submission import JobSubmissionClient
    assert tls_head.url.startswith("https://") and tls_head.ca
    out = ok(ray_job(tls_head, "submit", "--verify", tls_head.ca, "--submission-id", "tls-1", "--", "echo",
                     "over-tls"))
    assert "over-tls\n" in out and "Job 'tls-1' succeeded" in out
    unchecked = ray_job(tls_head, "list")  # the system's CAs do not know the cluster's
    assert unchecked.returncode == 1
    assert f"ConnectionError: Failed to connect to Ray at address: {tls_head.url}." in unchecked.stderr

    ray_client = RayClient(tls_head.url, headers=tls_head.auth, verify=tls_head.ca)
    job = ray_client.submit_job(entrypoint="echo sdk-tls", submission_id="tls-2")
    assert followed(ray_client, job) == "sdk-tls\n"
    assert ray_client.get_job_status(job) == "SUCCEEDED"

    monkeypatch.setenv("TORUS_TEMP_DIR", str(tls_head.root))
    client = JobSubmissionClient()  # the session's https address, token and CA
    assert client.get_address() == tls_head.url
    assert client.get_job_logs("tls-1") == "over-tls\n"
    assert sorted(j.submission_id for j in client.list_jobs()) == ["tls-1", "tls-2"]
    monkeypatch.setenv("TORUS_TEMP_DIR", "/nonexistent")
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        JobSubmissionClient(tls_head.url, headers=tls_head.auth)
    assert JobSubmissionClient(tls_head.url, headers=tls_head.auth, verify=tls_head.ca).get_version() == "4"
