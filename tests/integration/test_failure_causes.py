"""A failed attempt names its root cause first, then the symptoms (issue: runs explain themselves). Each cause is
produced by a real fault on a local cluster: a worker's non-zero exit, a missing executable, a kill from outside
torus, a user's stop, a libtpu error line, an operator's mark-dead, the kernel's OOM killer. (A lost host and goodput
are checked with the PyTorch runs of test_gang_runs.py.)"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Torus, binary, ephemeral_ports, wait_until

FAST = ("--node-timeout-ms", "1500")
CPU_GANG = ("--num-workers", "2", "--resources-per-worker", '{"CPU": 1}')
V6E_4X4 = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    t = Torus(tmp_path_factory.mktemp("causes") / "torus")
    try:
        t.up(*FAST)
        yield t
    finally:
        t.cleanup()


def train(torus, tmp_path, name, *flags, command, timeout=90):
    return torus.run("train", *flags, "--name", name, "--storage-path", str(tmp_path / "runs"), "--", *command,
                     timeout=timeout)


def run_json(torus, name):
    return json.loads(torus.ok("train", "status", name, "--json").stdout)


def failed_attempt(torus, name):
    run = run_json(torus, name)
    assert run["status"] == "FAILED", run
    attempt = run["attempts"][-1]
    assert attempt["explained"], attempt
    return run, attempt


def test_non_zero_exit_names_the_rank_and_its_last_lines(cluster, tmp_path):
    script = 'if [ "$RANK" = 1 ]; then echo "loading shard 7" >&2; echo "ValueError: bad batch" >&2; exit 3; fi; sleep 30'
    result = train(cluster, tmp_path, "exit3", *CPU_GANG, command=["sh", "-c", script])
    assert result.returncode == 1, result.stderr
    run, attempt = failed_attempt(cluster, "exit3")
    assert attempt["cause"] == "exit_code"
    assert re.fullmatch(r"rank 1 on \S+ exited with code 3: ValueError: bad batch; rank 0 stopped by torus",
                        attempt["end_reason"]), attempt["end_reason"]
    assert attempt["end_details"] == "loading shard 7\nValueError: bad batch"
    assert run["message"] == "failed 1 time (max_failures=0); last: " + attempt["end_reason"]
    # The CLI's stream ends with the cause and the rank's last lines.
    assert "[torus]   | ValueError: bad batch" in result.stderr, result.stderr
    status = cluster.ok("train", "status", "exit3").stdout
    assert "    | loading shard 7" in status, status
    assert "goodput " in status


def test_missing_executable_names_the_errno(cluster, tmp_path):
    result = train(cluster, tmp_path, "no-exec", *CPU_GANG, command=["no-such-program-xyz"])
    assert result.returncode == 1
    run, attempt = failed_attempt(cluster, "no-exec")
    assert attempt["cause"] == "start_failed"
    assert re.match(r"rank \d on \S+ failed to start: cannot execute 'no-such-program-xyz': No such file or "
                    r"directory \(errno 2, ENOENT\)", attempt["end_reason"]), attempt["end_reason"]


def test_kill_from_outside_is_told_from_a_stop_by_torus(cluster, tmp_path):
    script = 'if [ "$RANK" = 0 ]; then sleep 0.5; kill -9 $$; fi; sleep 30'
    result = train(cluster, tmp_path, "killed", *CPU_GANG, command=["sh", "-c", script])
    assert result.returncode == 1
    run, attempt = failed_attempt(cluster, "killed")
    assert attempt["cause"] == "signal"
    assert re.fullmatch(r"rank 0 on \S+ was killed by signal 9 \(SIGKILL\) from outside torus; rank 1 stopped by "
                        r"torus", attempt["end_reason"]), attempt["end_reason"]


def test_users_stop_is_the_cause(cluster, tmp_path):
    cluster.ok("train", "--no-wait", *CPU_GANG, "--name", "stopped", "--storage-path", str(tmp_path / "runs"), "--",
               "sleep", "60")
    wait_until(lambda: run_json(cluster, "stopped")["status"] == "RUNNING", 30, message="the run to start")
    cluster.ok("train", "stop", "stopped")
    run = wait_until(lambda: (lambda r: r if r["attempts"][-1]["explained"] else None)(run_json(cluster, "stopped")),
                     30, message="the stop to be explained")
    assert run["status"] == "STOPPED"
    attempt = run["attempts"][-1]
    assert attempt["cause"] == "stopped"
    assert attempt["end_reason"] == "stopped by the user; ranks 0, 1 stopped by torus"


def test_libtpu_error_line_is_the_cause(cluster, tmp_path):
    # Rank 2 logs what libtpu would on a chip failure, into the TPU log directory its agent gave it; then it dies,
    # and its peers fail after it.
    script = ('if [ "$RANK" = 2 ]; then '
              'echo "E1201 10:00:01.000000    77 tpu_driver.cc:1234] TPU chip 3 halted: HBM uncorrectable ECC error" '
              '>> "$TPU_LOG_DIR/tpu_driver.test.log"; exit 1; fi; sleep 30')
    result = train(cluster, tmp_path, "tpu-error", *V6E_4X4, command=["sh", "-c", script])
    assert result.returncode == 1
    run, attempt = failed_attempt(cluster, "tpu-error")
    assert attempt["cause"] == "accelerator_error"
    # The root cause first; then the other ranks, stopped (or, on a loaded machine, one not started yet when its
    # peer died).
    assert re.match(r"rank 2 on v6e-\d-w2 exited with code 1 after an accelerator error: TPU chip 3 halted: HBM "
                    r"uncorrectable ECC error; (ranks 0, 1, 3 stopped by torus|rank (\d) failed to start after its "
                    r"peer died; ranks \d, \d stopped by torus)$", attempt["end_reason"]), attempt["end_reason"]
    assert attempt["end_details"].startswith("E1201 10:00:01.000000")


def test_operators_mark_dead_is_the_cause(cluster, tmp_path):
    name = "marked"
    cluster.ok("train", "--no-wait", *V6E_4X4, "--name", name, "--storage-path", str(tmp_path / "runs"), "--",
               "sleep", "60")
    run = wait_until(lambda: (lambda r: r if r["status"] == "RUNNING" else None)(run_json(cluster, name)), 30,
                     message="the run to start")
    victim = run["attempts"][0]["ranks"][1]["node_id"]
    cluster.ok("node", "mark-dead", victim)
    run = wait_until(lambda: (lambda r: r if r["attempts"][0]["explained"] else None)(run_json(cluster, name)), 30,
                     message="attempt 1 to be explained")
    attempt = run["attempts"][0]
    assert attempt["cause"] == "node_marked_dead"
    assert attempt["end_reason"].startswith(f"host {victim} marked dead by an operator"), attempt["end_reason"]
    cluster.ok("train", "stop", name)


def test_job_failure_messages_say_why(cluster):
    result = cluster.run("job", "submit", "--submission-id", "quota", "--", "sh", "-c",
                         "echo 'disk quota exceeded' >&2; exit 3", timeout=60)
    assert result.returncode != 0
    jobs = json.loads(cluster.ok("job", "list", "--json").stdout)
    job = [j for j in jobs if j["submission_id"] == "quota"][0]
    assert job["status"] == "FAILED"
    assert job["message"] == ("Job entrypoint command failed with exit code 3, last available logs (truncated to "
                              "20,000 chars):\ndisk quota exceeded"), job["message"]


def test_lost_host_then_a_placement_that_cannot_be_renewed(cluster, tmp_path):
    # The cluster's only v4 slice: a host of it dies, and no other slice can take the gang.
    name = "no-spare"
    proc = subprocess.Popen([binary("torus"), "train", "--accelerator-type", "TPU-V4", "--topology", "2x2x2",
                             "--max-failures", "1", "--placement-timeout-s", "2", "--name", name,
                             "--storage-path", str(tmp_path / "runs"), "--", "sleep", "60"],
                            env=cluster.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def running():
            result = cluster.run("train", "status", name, "--json")
            run = json.loads(result.stdout) if result.returncode == 0 else None
            return run if run and run["status"] == "RUNNING" else None
        run = wait_until(running, 30, message="the run to start")
        victim = run["attempts"][0]["ranks"][1]["node_id"]
        os.kill(cluster.pid_of(victim), signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    run = run_json(cluster, name)
    assert run["status"] == "FAILED", run
    attempt = run["attempts"][0]
    assert (attempt["cause"], attempt["explained"]) == ("host_lost", True), attempt
    assert re.fullmatch(rf"host {victim} lost \(no heartbeat for \d+\.\d s\); rank 0 (stopped by torus|exited .*)",
                        attempt["end_reason"]), attempt["end_reason"]
    assert run["message"].startswith("its placement could not be renewed within 2 s: "), run["message"]
    assert run["message"].endswith(f"(attempt 1 ended: {attempt['end_reason']})"), run["message"]
    assert f"FAILED: its placement could not be renewed within 2 s" in err, err


def memory_cgroup():
    """A new memory cgroup (v1 or v2) under this process's own, or None where this machine gives none."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            parent = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            limit = "memory.limit_in_bytes"
            break
    else:
        v2 = [l.split(":", 2)[2] for l in Path("/proc/self/cgroup").read_text().splitlines() if l.startswith("0::")]
        if not v2:
            return None
        parent = Path("/sys/fs/cgroup") / v2[0].lstrip("/")
        limit = "memory.max"
    child = parent / f"torus-oom-test-{os.getpid()}"
    try:
        child.mkdir()
    except OSError:
        return None
    try:
        (child / limit).write_text(str(512 << 20))
    except OSError:
        child.rmdir()
        return None
    return child


def test_oom_killed_worker_is_named_with_its_peak_rss(tmp_path):
    cgroup = memory_cgroup()
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here (needs root and a writable cgroup hierarchy)")
    torus = Torus(tmp_path / "torus")
    try:
        # The head and its agent run in a cgroup limited to 512 MiB, as a pod with a memory limit; so do workers.
        argv = [binary("torus"), "start", "--head", *ephemeral_ports("torus", "start"), "--num-cpus", "4"]
        subprocess.run(["sh", "-c", f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"', "sh", *map(str, argv)],
                       env=torus.env, check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        grow = ("import time\nchunks = []\n"
                "while True:\n    chunks.append(bytearray(64 << 20))\n    time.sleep(0.02)\n")
        result = torus.run("train", *CPU_GANG, "--name", "oom", "--storage-path", str(tmp_path / "runs"), "--",
                           "/usr/bin/python3", "-c",
                           f'import os, time\nif os.environ["RANK"] == "1":\n    exec({grow!r})\ntime.sleep(60)',
                           timeout=90)
        assert result.returncode == 1, result.stderr
        run, attempt = failed_attempt(torus, "oom")
        assert attempt["cause"] == "oom_killed", attempt
        m = re.fullmatch(r"rank 1 on \S+ was killed by the kernel's OOM killer \(peak RSS (\d+\.\d) MiB\); rank 0 "
                         r"stopped by torus", attempt["end_reason"])
        assert m, attempt["end_reason"]
        assert 256 <= float(m[1]) <= 512, attempt["end_reason"]
        rank1 = attempt["ranks"][1]
        assert rank1["oom_killed"] and rank1["signal"] == 9, rank1
    finally:
        torus.cleanup()
        wait_until(lambda: not (cgroup / "cgroup.procs").read_text().strip(), 30, message="the cgroup to empty")
        cgroup.rmdir()
