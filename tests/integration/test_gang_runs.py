"""Gang training runs end to end (semantics §8, tpu.md §§4, 6): `torus train` starts one worker per host (or chip)
of simulated v6e slices, real PyTorch (gloo on CPU) trains across them, and a lost worker or host restarts the whole
gang from the last committed checkpoint."""

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import REPO, binary, head_http, node, pid_alive, wait_until

PYTHON = "/usr/bin/python3"
TRAIN_TORCH = str(REPO / "examples" / "train_torch.py")
V6E_4X4 = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")
FAST = ("--node-timeout-ms", "1500")  # hosts die in some tests
# Short runs: 30 steps of about 0.05 s, a checkpoint every 5; the same seed gives the same final loss.
TORCH_ARGS = ("--steps", "30", "--sleep", "0.05", "--checkpoint-every", "5", "--seed", "7")
TPU_RUNTIME_PORTS = {8081, 8476, *range(8431, 8439)}

# Every rank writes its own file and a shared one into a checkpoint at every even step of six.
CHECKPOINTING = """\
import os, tempfile
import torus_train
rank = torus_train.get_context().rank
for step in range(1, 7):
    with tempfile.TemporaryDirectory() as staged:
        for name in (f"rank{rank}.txt", "shared.txt"):
            with open(os.path.join(staged, name), "w") as f:
                f.write(f"rank {rank} step {step}")
        torus_train.report({"step": step}, checkpoint_dir=staged if step % 2 == 0 else None)
"""

# Prints the worker's environment as one JSON line, then runs the rest of its arguments (if any) in its place.
ENV_DUMP = """\
import json, os, sys
print("ENV " + json.dumps(dict(os.environ), sort_keys=True), flush=True)
if len(sys.argv) > 1:
    os.execv(sys.argv[1], sys.argv[1:])
"""


# Running `torus train`.

def env_dump(tmp_path):
    path = tmp_path / "env_dump.py"
    path.write_text(ENV_DUMP)
    return str(path)


def storage(tmp_path):
    return str(tmp_path / "runs")


def train(torus, tmp_path, *flags, command, timeout=120):
    """`torus train FLAGS --storage-path <tmp>/runs -- COMMAND`; the CompletedProcess, whatever its exit code."""
    return torus.run("train", *flags, "--storage-path", storage(tmp_path), "--", *command, timeout=timeout)


def train_ok(torus, tmp_path, *flags, command, timeout=120):
    result = train(torus, tmp_path, *flags, command=command, timeout=timeout)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def start_train(torus, tmp_path, *flags, command):
    """`torus train ...` in the background; returns its Popen (stdout and stderr piped, text)."""
    argv = [binary("torus"), "train", *flags, "--storage-path", storage(tmp_path), "--", *command]
    return subprocess.Popen([str(a) for a in argv], env=torus.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=120):
    """Waits for a background `torus train`; returns (exit code, stdout, stderr)."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def run_status(torus, name):
    """`torus train status NAME --json`."""
    return json.loads(torus.ok("train", "status", name, "--json").stdout)


def run_view(torus, name):
    """GET /api/v0/runs/NAME, or None while the run does not exist yet (cheaper than the CLI, for polling)."""
    base, context = head_http(torus.session)
    request = urllib.request.Request(f"{base}/api/v0/runs/{name}", headers={"Authorization": f"Bearer {torus.token}"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def rank_logs(torus, run_id, rank, *flags):
    return torus.ok("job", "logs", run_id, "--rank", rank, *flags).stdout


def rank_env(torus, run_id, rank):
    """The environment rank `rank` printed through ENV_DUMP, read back with `torus job logs RUN --rank R`."""
    lines = [line for line in rank_logs(torus, run_id, rank).splitlines() if line.startswith("ENV ")]
    assert len(lines) == 1, f"rank {rank} printed {len(lines)} ENV lines"
    return json.loads(lines[0][len("ENV "):])


def final_loss(output):
    losses = re.findall(r"^\[rank 0\] final loss: (\S+)$", output, re.M)
    assert len(losses) == 1, f"expected one final loss from rank 0:\n{output}"
    return losses[0]


def resumed_steps(output):
    """{rank: step} of every `resumed from step N` line."""
    return {int(r): int(s) for r, s in re.findall(r"^\[rank (\d+)\] resumed from step (\d+)$", output, re.M)}


# The cluster.

def addresses(torus):
    """node id -> address."""
    return {n["node_id"]: n["address"] for n in torus.status()["nodes"]}


def slice_hosts(torus, slice_name):
    """The slice's node ids in worker-id order."""
    s = [s for s in torus.status()["slices"] if s["name"] == slice_name]
    assert len(s) == 1, slice_name
    return [h["node_id"] for h in sorted(s[0]["hosts"], key=lambda h: h["worker_id"])]


def assert_one_v6e_slice_in_worker_order(torus, ranks):
    """Four ranks, one per host of a single v6e slice, rank i on worker i, each with all four chips."""
    slices = {r["slice"] for r in ranks}
    assert len(slices) == 1 and slices <= {"v6e-0", "v6e-1"}, ranks
    slice_name = slices.pop()
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["node_id"] for r in ranks] == slice_hosts(torus, slice_name) == [f"{slice_name}-w{w}" for w in range(4)]
    assert all(r["chips"] == [0, 1, 2, 3] for r in ranks), ranks
    return slice_name


def worker_pids(run_id, rank):
    """Pids of live processes started as rank `rank` of run `run_id` (found by their environment)."""
    wanted = {f"TORUS_RUN_ID={run_id}".encode(), f"TORUS_RANK={rank}".encode()}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = set(Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environ and pid_alive(int(entry)):
            pids.append(int(entry))
    return pids


def wait_for_checkpoint_mid_run(torus, name, total_steps):
    """Waits until attempt 1 of run NAME has committed a checkpoint and is still training; returns the run."""
    def ready():
        run = run_view(torus, name)
        if run is None or not run["checkpoints"]:
            return None
        return run
    run = wait_until(ready, 60, interval=0.02, message=f"a committed checkpoint of run {name}")
    assert run["status"] == "RUNNING" and run["attempt"] == 1, run
    assert run["checkpoints"][-1]["step"] < total_steps, "the run ended before the test could interrupt it"
    return run


def assert_restarted_env(torus, run, checkpoint):
    """Attempt 2's environment comes from its own placement and carries the checkpoint it resumed from."""
    ranks = run["attempts"][-1]["ranks"]
    address_of = addresses(torus)
    hosts = ",".join(address_of[r["node_id"]] for r in ranks)
    for rank, placed in enumerate(ranks):
        env = rank_env(torus, run["run_id"], rank)
        assert (env["TORUS_ATTEMPT"], env["TORUS_CHECKPOINT_DIR"]) == ("2", checkpoint), f"rank {rank}"
        assert (env["RANK"], env["WORLD_SIZE"], env["TPU_WORKER_ID"]) == (str(rank), "4", str(rank))
        assert env["TPU_NAME"] == placed["slice"]
        assert env["TPU_WORKER_HOSTNAMES"] == hosts
        assert env["MASTER_ADDR"] == address_of[ranks[0]["node_id"]]


# One worker per host.

def test_four_workers_on_a_v6e_slice(torus, tmp_path):
    torus.up()
    result = train_ok(torus, tmp_path, *V6E_4X4, "--name", "four-hosts",
                      command=[PYTHON, env_dump(tmp_path), PYTHON, TRAIN_TORCH, "--steps", "20",
                               "--sleep", "0.05", "--checkpoint-every", "5"])
    for rank in range(4):
        assert f"[rank {rank}] world_size check: all_reduce=4 WORLD_SIZE=4\n" in result.stdout
    final_loss(result.stdout)
    assert "SUCCEEDED" in result.stderr

    run = run_status(torus, "four-hosts")
    assert run["status"] == "SUCCEEDED", run
    assert run["num_workers"] == 4 and run["failures"] == 0
    assert len(run["attempts"]) == 1
    ranks = run["attempts"][0]["ranks"]
    slice_name = assert_one_v6e_slice_in_worker_order(torus, ranks)
    assert all(r["exited"] and r["exit_code"] == 0 and r["signal"] == 0 for r in ranks), ranks
    # Checkpoints are committed under <storage>/<name>/checkpoint_<step>.
    run_dir = Path(storage(tmp_path)) / "four-hosts"
    assert run["storage_path"] == str(run_dir)
    assert [c["step"] for c in run["checkpoints"]] == [5, 10, 15, 20]
    assert all(Path(c["dir"]) == run_dir / f"checkpoint_{c['step']}" and Path(c["dir"]).is_dir()
               for c in run["checkpoints"])

    run_id = run["run_id"]
    address_of = addresses(torus)
    hosts = slice_hosts(torus, slice_name)
    rank0 = address_of[hosts[0]]
    envs = [rank_env(torus, run_id, rank) for rank in range(4)]
    master_port = envs[0]["MASTER_PORT"]
    jax_address = envs[0]["JAX_COORDINATOR_ADDRESS"]
    dashboard = (torus.session / "dashboard_address").read_text().strip()
    for rank, env in enumerate(envs):
        assert ranks[rank]["address"] == address_of[hosts[rank]]
        expected = {
            "RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": str(rank), "MASTER_ADDR": rank0, "MASTER_PORT": master_port,
            "JAX_COORDINATOR_ADDRESS": jax_address, "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": str(rank),
            "JAX_PLATFORMS": "tpu",
            "TPU_WORKER_ID": str(rank), "TPU_WORKER_HOSTNAMES": ",".join(address_of[h] for h in hosts),
            "TPU_NAME": slice_name, "TPU_TOPOLOGY": "4x4", "TPU_ACCELERATOR_TYPE": "v6e-16",
            "TORUS_RUN_ID": run_id, "TORUS_RUN_NAME": "four-hosts", "TORUS_ATTEMPT": "1",
            "TORUS_RANK": str(rank), "TORUS_WORLD_SIZE": "4", "TORUS_LOCAL_RANK": "0", "TORUS_SLICE_ID": "0",
            "TORUS_STORAGE_PATH": str(run_dir), "TORUS_CHECKPOINT_DIR": "",
            "TORUS_REPORT_URL": f"http://{dashboard}/api/v0/runs/{run_id}/report",
        }
        assert {k: env.get(k) for k in expected} == expected, f"rank {rank}"
        assert env["TORUS_RUN_TOKEN"] and env["TORUS_RUN_TOKEN"] == envs[0]["TORUS_RUN_TOKEN"]
        assert env["TORUS_RUN_TOKEN"] != torus.token, "workers must not get the cluster token"
        # A whole host: no chip isolation, no multislice.
        assert not {k for k in env if k.startswith("MEGASCALE_")}, f"rank {rank}"
        for key in ("TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"):
            assert key not in env, f"rank {rank}: {key}={env[key]}"
        assert any(Path(p, "torus_train.py").is_file() for p in env["PYTHONPATH"].split(":")), env["PYTHONPATH"]
    # The rendezvous ports are free ports of rank 0's host, distinct, and never the TPU runtime's.
    jax_host, jax_port = jax_address.rsplit(":", 1)
    assert jax_host == rank0
    assert int(master_port) != int(jax_port)
    assert not {int(master_port), int(jax_port)} & TPU_RUNTIME_PORTS


# One worker per chip.

def test_one_worker_per_chip(torus, tmp_path):
    torus.up()
    train_ok(torus, tmp_path, *V6E_4X4, "--resources-per-worker", '{"TPU": 1}', "--name", "per-chip",
             command=[PYTHON, env_dump(tmp_path)])
    run = run_status(torus, "per-chip")
    assert run["status"] == "SUCCEEDED", run
    assert run["num_workers"] == 16
    ranks = run["attempts"][0]["ranks"]
    assert [r["rank"] for r in ranks] == list(range(16))
    slice_name = ranks[0]["slice"]
    hosts = slice_hosts(torus, slice_name)
    # Host-major, chip-minor: rank 4h+c holds chip c of worker h.
    assert [(r["slice"], r["node_id"], r["chips"]) for r in ranks] == [
        (slice_name, hosts[h], [c]) for h in range(4) for c in range(4)]

    seen = set()
    for rank, placed in enumerate(ranks):
        env = rank_env(torus, run["run_id"], rank)
        host, chip = placed["node_id"], int(env["TPU_VISIBLE_CHIPS"])
        assert env["TPU_VISIBLE_CHIPS"] == str(chip) and chip == placed["chips"][0], f"rank {rank}"
        assert (env["TPU_CHIPS_PER_HOST_BOUNDS"], env["TPU_HOST_BOUNDS"]) == ("1,1,1", "1,1,1"), f"rank {rank}"
        # A sub-host worker is a one-host slice of its own (tpu.md §4).
        assert (env["TPU_WORKER_ID"], env["TPU_WORKER_HOSTNAMES"]) == ("0", "localhost"), f"rank {rank}"
        assert not {k for k in env if k.startswith("MEGASCALE_")}, f"rank {rank}"
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "16")
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == (
            str(rank % 4), "4", str(rank // 4)), f"rank {rank}"
        seen.add((host, chip))
    assert len(seen) == 16, "two workers share a chip"
    assert {chip for _, chip in seen} == {0, 1, 2, 3}


# Multislice.

def test_two_slices_get_megascale_env_and_one_slice_gets_none(torus, tmp_path):
    torus.up()
    script = env_dump(tmp_path)
    train_ok(torus, tmp_path, *V6E_4X4, "--num-slices", "2", "--name", "two-slices", command=[PYTHON, script])
    run = run_status(torus, "two-slices")
    assert run["status"] == "SUCCEEDED", run
    assert run["num_workers"] == 8
    ranks = run["attempts"][0]["ranks"]
    assert [r["rank"] for r in ranks] == list(range(8))
    slices = [ranks[0]["slice"], ranks[4]["slice"]]
    assert sorted(slices) == ["v6e-0", "v6e-1"]
    address_of = addresses(torus)
    hosts = {s: slice_hosts(torus, s) for s in slices}
    assert [r["node_id"] for r in ranks] == hosts[slices[0]] + hosts[slices[1]]
    rank0 = address_of[ranks[0]["node_id"]]
    for rank in range(8):
        env = rank_env(torus, run["run_id"], rank)
        slice_id, worker = divmod(rank, 4)
        megascale = {k: v for k, v in env.items() if k.startswith("MEGASCALE_")}
        assert megascale == {"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": str(slice_id),
                             "MEGASCALE_COORDINATOR_ADDRESS": rank0, "MEGASCALE_PORT": "8081"}, f"rank {rank}"
        assert (env["RANK"], env["WORLD_SIZE"], env["NODE_RANK"]) == (str(rank), "8", str(rank))
        assert env["TORUS_SLICE_ID"] == str(slice_id)
        assert env["TPU_NAME"] == slices[slice_id]
        assert env["TPU_WORKER_ID"] == str(worker)
        assert env["TPU_WORKER_HOSTNAMES"] == ",".join(address_of[h] for h in hosts[slices[slice_id]])
        assert env["MASTER_ADDR"] == rank0

    # One slice: no MEGASCALE_* at all, even ones the user passes.
    train_ok(torus, tmp_path, *V6E_4X4, "--env", "MEGASCALE_NUM_SLICES=7", "--env", "MEGASCALE_SLICE_ID=3",
             "--env", "KEPT=yes", "--name", "one-slice", command=[PYTHON, script])
    run = run_status(torus, "one-slice")
    assert run["status"] == "SUCCEEDED", run
    for rank in range(4):
        env = rank_env(torus, run["run_id"], rank)
        assert not {k: v for k, v in env.items() if k.startswith("MEGASCALE_")}, f"rank {rank}"
        assert env["KEPT"] == "yes"


# A worker dies.

def test_killed_worker_restarts_gang_from_checkpoint(torus, tmp_path):
    torus.up()
    command = [PYTHON, TRAIN_TORCH, *TORCH_ARGS]
    undisturbed = train_ok(torus, tmp_path, *V6E_4X4, "--name", "undisturbed", command=command)
    expected_loss = final_loss(undisturbed.stdout)
    assert not resumed_steps(undisturbed.stdout)

    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "worker-killed", "--max-failures", "2",
                       command=[PYTHON, env_dump(tmp_path), *command])
    try:
        run = wait_for_checkpoint_mid_run(torus, "worker-killed", 30)
        victims = worker_pids(run["run_id"], 2)
        assert len(victims) == 1, victims
        os.kill(victims[0], signal.SIGKILL)
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"

    run = run_status(torus, "worker-killed")
    assert run["status"] == "SUCCEEDED", run
    assert run["failures"] == 1
    assert [a["attempt"] for a in run["attempts"]] == [1, 2]
    first, second = run["attempts"]
    # The root cause first: a kill from outside torus; the others were stopped by torus after it.
    assert re.fullmatch(r"rank 2 on v6e-\d-w2 was killed by signal 9 \(SIGKILL\) from outside torus; ranks 0, 1, 3 "
                        r"stopped by torus", first["end_reason"]), first["end_reason"]
    assert (first["cause"], first["explained"]) == ("signal", True)
    assert first["checkpoint_dir"] == ""
    checkpoint = second["checkpoint_dir"]
    assert checkpoint, second
    step = int(re.fullmatch(r".*/worker-killed/checkpoint_(\d+)", checkpoint)[1])
    assert step > 0 and step % 5 == 0
    # Every rank of attempt 2 resumed from that step, and the loss is as if nothing happened.
    assert resumed_steps(out) == {0: step, 1: step, 2: step, 3: step}, out
    assert "attempt 1 ended: rank 2" in err
    assert final_loss(out) == expected_loss
    assert_one_v6e_slice_in_worker_order(torus, second["ranks"])
    assert_restarted_env(torus, run, checkpoint)
    assert_goodput_adds_up(torus, run)


def assert_goodput_adds_up(torus, run):
    """The run's goodput: its parts sum to its wall time (within 1%), the failure lost work and a restart, and
    /metrics says the same."""
    g = run["goodput"]
    parts = g["queued_s"] + g["startup_s"] + g["productive_s"] + g["lost_s"] + g["restart_s"]
    assert abs(parts - g["wall_s"]) <= 0.01 * g["wall_s"], g
    assert abs(g["wall_s"] - (run["end_time_ms"] - run["created_time_ms"]) / 1000) <= 0.01 * g["wall_s"], g
    assert g["productive_s"] > 0 and g["restart_s"] > 0 and g["startup_s"] > 0, g
    # The kill came after a checkpoint was committed: the first attempt lost the work since then, the second none.
    assert g["lost_s"] > 0 and g["attempts"][0]["lost_s"] > 0 and g["attempts"][1]["lost_s"] == 0, g
    assert abs(g["lost_s"] - g["attempts"][0]["lost_s"]) < 0.002, g
    assert abs(g["goodput"] - g["productive_s"] / g["wall_s"]) < 1e-6, g
    assert [a["attempt"] for a in g["attempts"]] == [1, 2]
    for a, per in zip(run["attempts"], g["attempts"]):
        span = (a["end_time_ms"] - a["start_time_ms"]) / 1000
        assert abs(per["startup_s"] + per["productive_s"] + per["lost_s"] - span) < 0.002, (a, per)
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/metrics", headers={"Authorization": f"Bearer {torus.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    ratio = re.search(r'^torus_run_goodput_ratio\{[^}]*run_id="%s"[^}]*\} (\S+)$' % re.escape(run["run_id"]), text, re.M)
    assert ratio and abs(float(ratio[1]) - g["goodput"]) < 0.01, [l for l in text.splitlines() if "torus_run" in l]
    lost = re.search(r'^torus_run_time_seconds\{run_id="%s",name="[^"]*",part="lost"\} (\S+)$' % re.escape(run["run_id"]),
                     text, re.M)
    assert lost and abs(float(lost[1]) - g["lost_s"]) < 0.5, [l for l in text.splitlines() if "torus_run_time" in l]


# A host dies.

def test_killed_agent_restarts_gang_on_a_whole_slice(torus, tmp_path):
    torus.up(*FAST)
    command = [PYTHON, TRAIN_TORCH, *TORCH_ARGS]
    expected_loss = final_loss(train_ok(torus, tmp_path, *V6E_4X4, "--name", "undisturbed", command=command).stdout)

    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "host-lost", "--max-failures", "2",
                       command=[PYTHON, env_dump(tmp_path), *command])
    try:
        run = wait_for_checkpoint_mid_run(torus, "host-lost", 30)
        lost = run["attempts"][0]["ranks"][1]["node_id"]
        os.kill(torus.pid_of(lost), signal.SIGKILL)
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"

    run = run_status(torus, "host-lost")
    assert run["status"] == "SUCCEEDED", run
    assert run["failures"] == 1, run["attempts"]
    assert [a["attempt"] for a in run["attempts"]] == [1, 2]
    first, second = run["attempts"]
    # The whole gang stopped: every worker of attempt 1 off the lost host exited.
    assert all(r["exited"] for r in first["ranks"] if r["node_id"] != lost), first["ranks"]
    # And moved: four ranks on one complete slice, none on the lost host.
    assert_one_v6e_slice_in_worker_order(torus, second["ranks"])
    assert lost not in [r["node_id"] for r in second["ranks"]]
    assert node(torus.status(), lost)["state"] == "DEAD"
    # The root cause is the host, although a peer's broken collective reached the head seconds before the host was
    # declared dead; the peers' failures follow as symptoms.
    assert (first["cause"], first["explained"]) == ("host_lost", True), first
    assert first["end_reason"].startswith(f"host {lost} lost (no heartbeat for "), first["end_reason"]
    assert f"attempt 1 ended: host {lost} lost" in err, err
    checkpoint = second["checkpoint_dir"]
    step = int(re.fullmatch(r".*/host-lost/checkpoint_(\d+)", checkpoint)[1])
    assert step > 0
    assert resumed_steps(out) == {0: step, 1: step, 2: step, 3: step}, out
    assert final_loss(out) == expected_loss
    assert_restarted_env(torus, run, checkpoint)


# Failures.

def test_always_failing_run_fails_after_max_failures(torus, tmp_path):
    torus.up()
    result = train(torus, tmp_path, *V6E_4X4, "--name", "always-fails", "--max-failures", "1",
                   command=["sh", "-c", 'echo "attempt $TORUS_ATTEMPT rank $RANK failing"; exit 3'])
    assert result.returncode == 1, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    run = run_status(torus, "always-fails")
    assert run["status"] == "FAILED", run
    assert run["failures"] == 2
    assert [a["attempt"] for a in run["attempts"]] == [1, 2]
    assert re.match(r"failed 2 times \(max_failures=1\); last: rank \d on v6e-\d-w\d exited with code 3: attempt 2 "
                    r"rank \d failing(;|$)", run["message"]), run["message"]
    assert all(re.match(r"rank \d on v6e-\d-w\d exited with code 3: attempt \d rank \d failing(;|$)",
                        a["end_reason"]) for a in run["attempts"]), run["attempts"]
    assert "FAILED" in result.stderr and "max_failures=1" in result.stderr
    # The first rank to fail stops the others, perhaps before they print.
    assert re.search(r"^\[rank (\d)\] attempt 2 rank \1 failing$", result.stdout, re.M), result.stdout


def test_one_failing_rank_stops_the_whole_gang(torus, tmp_path):
    torus.up()
    started = time.monotonic()
    result = train(torus, tmp_path, *V6E_4X4, "--name", "one-fails",
                   command=["sh", "-c", 'if [ "$RANK" = 1 ]; then sleep 1; exit 5; fi; exec sleep 60'])
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 10, f"the other ranks kept the run alive for {elapsed:.1f} s"
    run = run_status(torus, "one-fails")
    assert run["status"] == "FAILED", run
    reason = run["attempts"][0]["end_reason"]
    assert re.fullmatch(r"rank 1 on v6e-\d-w1 exited with code 5; ranks 0, 2, 3 stopped by torus", reason), reason
    assert run["message"] == f"failed 1 time (max_failures=0); last: {reason}"
    wait_until(lambda: not any(worker_pids(run["run_id"], rank) for rank in range(4)), 5,
               message="every worker of the failed gang to exit")


def test_ended_run_records_how_every_worker_exited(torus, tmp_path):
    # Workers stopped because the run failed or was stopped still have their exit recorded, so `train status`
    # never shows a worker of an ended run as running.
    torus.up()
    train(torus, tmp_path, *V6E_4X4, "--name", "one-fails",
          command=["sh", "-c", 'if [ "$RANK" = 1 ]; then sleep 1; exit 5; fi; exec sleep 60'])
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "stopped", command=["sleep", "60"])
    try:
        wait_until(lambda: (lambda r: r and r["status"] == "RUNNING")(run_view(torus, "stopped")), 30,
                   message="the run to start")
        torus.ok("train", "stop", "stopped")
        finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    for name, stopped in (("one-fails", [0, 2, 3]), ("stopped", [0, 1, 2, 3])):
        def recorded():
            ranks = run_status(torus, name)["attempts"][-1]["ranks"]
            return ranks if all(r["exited"] for r in ranks) else None
        ranks = wait_until(recorded, 5, interval=0.2, message=f"every worker exit of run {name} to be recorded")
        for rank in stopped:
            assert ranks[rank]["signal"] == signal.SIGTERM, (name, ranks[rank])


# Validation.

def test_invalid_runs_are_refused(torus, tmp_path):
    torus.up()
    cases = [
        ((*V6E_4X4, "--num-workers", "6", "--num-slices", "2"),
         "num_workers=6 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8"),
        ((*V6E_4X4, "--resources-per-worker", '{"TPU": 3}'),
         "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"),
        (("--accelerator-type", "TPU-V6E", "--topology", "3x3"),
         'topology "3x3" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16'),
        ((*V6E_4X4, "--use-gpu"), "use_tpu and use_gpu cannot both be set"),
        (("--topology", "4x4"), "use_tpu requires accelerator_type and topology"),
    ]
    for flags, message in cases:
        result = train(torus, tmp_path, *flags, "--name", "refused", command=["true"])
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr, (flags, result.stderr)
    assert json.loads(torus.ok("train", "list", "--json").stdout) == [], "a refused run was created"


# Logs.

# Checkpoints.

def test_checkpoints_merge_every_rank_and_keep_the_newest(torus, tmp_path):
    torus.up()
    script = tmp_path / "checkpointing.py"
    script.write_text(CHECKPOINTING)
    train_ok(torus, tmp_path, *V6E_4X4, "--name", "keeper", "--checkpoints-to-keep", "2",
             command=[PYTHON, str(script)])
    run = run_status(torus, "keeper")
    assert run["status"] == "SUCCEEDED", run
    run_dir = Path(storage(tmp_path)) / "keeper"
    assert run["checkpoints"] == [{"step": s, "dir": str(run_dir / f"checkpoint_{s}")} for s in (4, 6)]
    assert sorted(p.name for p in run_dir.glob("checkpoint_*")) == ["checkpoint_4", "checkpoint_6"]
    newest = run_dir / "checkpoint_6"
    assert (newest / ".torus_committed").is_file()
    for rank in range(4):
        assert (newest / f"rank{rank}.txt").read_text() == f"rank {rank} step 6"
    assert (newest / "shared.txt").read_text() == "rank 0 step 6", "on a name clash the lowest rank wins"
    assert [m["step"] for m in run["attempts"][0]["metrics"]] == [1, 2, 3, 4, 5, 6]

    # A later run of the same name and storage path starts from that name's newest checkpoint (README,
    # docs/training.md); a new name starts fresh.
    again = train_ok(torus, tmp_path, *V6E_4X4, "--name", "keeper", command=[PYTHON, env_dump(tmp_path)])
    assert f"[torus] attempt 1: 4 workers, resuming from {newest}" in again.stderr, again.stderr
    second = run_status(torus, "keeper")
    assert second["run_id"] != run["run_id"] and second["status"] == "SUCCEEDED", second
    assert second["attempts"][0]["checkpoint_dir"] == str(newest)
    for rank in (0, 3):
        assert rank_env(torus, second["run_id"], rank)["TORUS_CHECKPOINT_DIR"] == str(newest), f"rank {rank}"
    fresh = train_ok(torus, tmp_path, *V6E_4X4, "--name", "newcomer", command=[PYTHON, env_dump(tmp_path)])
    assert "resuming from" not in fresh.stderr, fresh.stderr
    assert rank_env(torus, run_status(torus, "newcomer")["run_id"], 0)["TORUS_CHECKPOINT_DIR"] == ""


# A user's stop.

def test_stopped_run_is_stopped_not_failed(torus, tmp_path):
    torus.up()
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "sleepers", "--max-failures", "3",
                       command=["sh", "-c", 'echo "rank $RANK up"; exec sleep 60'])
    try:
        run = wait_until(lambda: (lambda r: r if r and r["status"] == "RUNNING" else None)(
            run_view(torus, "sleepers")), 30, message="the run to start")
        pids = wait_until(lambda: (lambda p: p if len(p) == 4 else None)(
            [pid for rank in range(4) for pid in worker_pids(run["run_id"], rank)]), 10,
            message="four workers")
        assert torus.ok("train", "stop", "sleepers").stdout == "sleepers stopped\n"
        code, _, err = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "STOPPED" in err
    run = run_status(torus, "sleepers")
    assert run["status"] == "STOPPED", run
    assert run["failures"] == 0 and len(run["attempts"]) == 1, "a user's stop is not a failure"
    wait_until(lambda: not any(pid_alive(p) for p in pids), 5, message="every worker to exit")
    assert torus.ok("train", "stop", "sleepers").stdout == "sleepers had already ended\n"
    assert run_status(torus, "sleepers")["status"] == "STOPPED"


def test_gpu_runs_sharing_a_host_get_distinct_gpus(torus, tmp_path):
    """Two one-worker GPU runs pinned to the same 2-GPU host each see a GPU of their own."""
    torus.up()
    pin = ("--use-gpu", "--num-workers", "1", "--label-selector", json.dumps({"torus.io/node-id": "gpu-0"}))
    first = start_train(torus, tmp_path, *pin, "--name", "gpu-a", command=["/usr/bin/python3", env_dump(tmp_path),
                                                                           "/bin/sleep", "30"])
    second = start_train(torus, tmp_path, *pin, "--name", "gpu-b", command=["/usr/bin/python3", env_dump(tmp_path),
                                                                            "/bin/sleep", "30"])
    try:
        views = [wait_until(lambda n=n: (v := run_view(torus, n)) and v["status"] == "RUNNING" and v, 20,
                            message=f"{n} to run") for n in ("gpu-a", "gpu-b")]
        devices = []
        for view in views:
            env = wait_until(lambda view=view: [l for l in rank_logs(torus, view["run_id"], 0).splitlines()
                                                if l.startswith("ENV ")], 10, message="the worker's environment")
            devices.append(json.loads(env[0][len("ENV "):])["CUDA_VISIBLE_DEVICES"])
            assert view["attempts"][-1]["ranks"][0]["node_id"] == "gpu-0"
        assert sorted(devices) == ["0", "1"], devices
    finally:
        for name in ("gpu-a", "gpu-b"):
            torus.run("train", "stop", name)
        finish(first, 30)
        finish(second, 30)


# The report endpoint of the real head (tests/python runs torus_train against a fake one).

def test_the_heads_report_endpoint_checks_token_attempt_rank_and_staged_directory(torus, tmp_path):
    torus.up()
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "reporter",
                       command=[PYTHON, env_dump(tmp_path), "/bin/sleep", "60"])
    try:
        run = wait_until(lambda: (lambda r: r if r and r["status"] == "RUNNING" else None)(
            run_view(torus, "reporter")), 30, message="the run to start")
        run_id = run["run_id"]
        env = wait_until(lambda: _env_or_none(torus, run_id, 0), 30, message="rank 0's environment")
        token = env["TORUS_RUN_TOKEN"]
        staging = Path(env["TORUS_STORAGE_PATH"]) / ".staging" / "attempt_1"
        address = (torus.session / "dashboard_address").read_text().strip()

        def report(body, bearer=token, target=run_id):
            request = urllib.request.Request(f"http://{address}/api/v0/runs/{target}/report",
                                             data=json.dumps(body).encode(), method="POST",
                                             headers={"Authorization": f"Bearer {bearer}",
                                                      "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        good = {"rank": 0, "attempt": 1, "step": 1, "metrics": {"loss": 0.5}}
        assert report(good, bearer=torus.token) == (401, {"error": "wrong run token"})  # the cluster's is not it
        assert report(good, bearer="nope") == (401, {"error": "wrong run token"})
        assert report({**good, "attempt": 2}) == (409, {"error": f"attempt 2 of run {run_id} is not the running one"})
        assert report({**good, "rank": 4}) == (400, {"error": "rank 4 is out of range"})
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        code, body = report({**good, "checkpoint": str(outside)})
        assert code == 400 and body["error"] == (f'checkpoint "{outside}" is not staged under '
                                                 f'{staging.parent}; report it with torus_train'), body
        assert report(good) == (200, {"committed": False})
        status = wait_until(lambda: (lambda r: r if r["attempts"][0]["metrics"] else None)(run_view(torus, run_id)),
                            10, message="the report to show")
        [metrics] = status["attempts"][0]["metrics"]
        assert (metrics["step"], metrics["metrics"]) == (1, {"loss": 0.5}), metrics

        # Step 2 with a staged checkpoint from every rank: the last report commits it.
        answers = []
        for rank in range(4):
            staged = staging / f"rank{rank}_step2"
            staged.mkdir(parents=True)
            (staged / f"rank{rank}.txt").write_text(f"rank {rank}")
            answers.append(report({"rank": rank, "attempt": 1, "step": 2, "metrics": {}, "checkpoint": str(staged)}))
        committed = Path(env["TORUS_STORAGE_PATH"]) / "checkpoint_2"
        assert answers == [(200, {"committed": False})] * 3 + [(200, {"committed": True, "checkpoint": str(committed)})]
        assert sorted(p.name for p in committed.iterdir()) == [".torus_committed"] + [f"rank{r}.txt" for r in range(4)]
    finally:
        torus.run("train", "stop", "reporter")
        if proc.poll() is None:
            proc.communicate(timeout=60)


def _env_or_none(torus, run_id, rank):
    lines = [line for line in rank_logs(torus, run_id, rank).splitlines() if line.startswith("ENV ")]
    return json.loads(lines[0][len("ENV "):]) if lines else None
