"""Tests of python/torus_train.py against a fake head, and of examples/train_torch.py as a two-rank gang run."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import torus_train
from fake_head import REPO, RUN_ID, RUN_TOKEN, FakeHead, commit, running_head, subprocess_env

# ---------------------------------------------------------------------------------------------------------------
# report()


def test_report_sends_headers_and_body(worker_env: Path, fake_head: FakeHead) -> None:
    torus_train.report({"step": 3, "loss": 0.25, "lr": [0.1, 0.01], "tag": "warmup"})

    [request] = fake_head.requests
    assert request.path == f"/api/v0/runs/{RUN_ID}/report"
    assert request.headers["Authorization"] == f"Bearer {RUN_TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == {
        "rank": 1,
        "attempt": 2,
        "step": 3,
        "metrics": {"step": 3, "loss": 0.25, "lr": [0.1, 0.01], "tag": "warmup"},
        "checkpoint": None,
    }


def test_report_stages_checkpoint_copy(worker_env: Path, fake_head: FakeHead, tmp_path: Path) -> None:
    source = tmp_path / "my_ckpt"
    (source / "shards").mkdir(parents=True)
    (source / "model.pt").write_bytes(b"weights")
    (source / "shards" / "part-0").write_text("shard")

    torus_train.report({"step": 10, "loss": 1.0}, checkpoint_dir=str(source))

    staged = worker_env / ".staging" / "attempt_2" / "step_10" / "rank_1"
    assert fake_head.reports()[0]["checkpoint"] == str(staged)
    assert (staged / "model.pt").read_bytes() == b"weights"
    assert (staged / "shards" / "part-0").read_text() == "shard"
    assert sorted(p.name for p in staged.parent.iterdir()) == ["rank_1"], "no partial copies left behind"
    assert (source / "model.pt").exists(), "the caller's directory is left alone"

    # Reporting the same step again replaces the staged copy instead of merging into it.
    (source / "shards" / "part-0").unlink()
    (source / "model.pt").write_bytes(b"newer")
    torus_train.report({"step": 10, "loss": 1.0}, checkpoint_dir=str(source))
    assert (staged / "model.pt").read_bytes() == b"newer"
    assert not (staged / "shards" / "part-0").exists()


def test_report_checkpoint_dir_must_exist(worker_env: Path, fake_head: FakeHead, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a directory"):
        torus_train.report({"step": 1}, checkpoint_dir=str(tmp_path / "missing"))
    assert fake_head.requests == []


def test_report_step_counter(worker_env: Path, fake_head: FakeHead) -> None:
    torus_train.report({"loss": 1.0})
    torus_train.report({"loss": 0.9})
    torus_train.report({"step": 10, "loss": 0.8})
    torus_train.report({"loss": 0.7})

    assert [r["step"] for r in fake_head.reports()] == [1, 2, 10, 11]
    assert fake_head.reports()[0]["metrics"] == {"loss": 1.0}, "the counter is not added to the metrics"


@pytest.mark.parametrize(
    "metrics, message",
    [
        ({"loss": object()}, "object value"),
        ({"loss": {1, 2}}, "set value"),
        ({"loss": float("nan")}, r"NaN/Infinity\) at metrics\['loss'\]"),
        ({"nested": {"values": [1.0, float("inf")]}}, r"metrics\['nested'\]\['values'\]\[1\]"),
        ([("loss", 1.0)], "must be a dict"),
        ({"step": 1.5}, r'metrics\["step"\] must be an int'),
        ({"step": True}, r'metrics\["step"\] must be an int'),
    ],
)
def test_report_rejects_bad_metrics(worker_env: Path, fake_head: FakeHead, metrics: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        torus_train.report(metrics)  # type: ignore[arg-type]
    assert fake_head.requests == []


def test_report_retries_transient_503(worker_env: Path, fake_head: FakeHead, capsys: pytest.CaptureFixture) -> None:
    fake_head.responses.append((503, {"error": "head is busy"}))

    torus_train.report({"step": 1, "loss": 0.5})

    assert len(fake_head.requests) == 2
    assert fake_head.requests[0].body == fake_head.requests[1].body
    assert "HTTP 503: head is busy" in capsys.readouterr().err


def test_report_retries_connection_errors_then_gives_up(
    worker_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    with socket.socket() as sock:  # A port nothing listens on.
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("TORUS_REPORT_URL", f"http://127.0.0.1:{port}/api/v0/runs/{RUN_ID}/report")

    with pytest.raises(ConnectionError, match="after 6 tries"):
        torus_train.report({"step": 1})
    assert capsys.readouterr().err.count("retrying in") == torus_train.REPORT_RETRIES


def test_report_reaches_head_that_comes_up_late(worker_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection refused on the first try is retried; the report lands once the head listens."""
    with running_head() as head:
        monkeypatch.setenv("TORUS_REPORT_URL", head.url)
        real_post = torus_train._post
        calls: List[str] = []

        def refuse_once(url: str, token: Optional[str], body: bytes) -> bytes:
            calls.append(url)
            if len(calls) == 1:
                raise ConnectionRefusedError(111, "Connection refused")
            return real_post(url, token, body)

        monkeypatch.setattr(torus_train, "_post", refuse_once)
        torus_train.report({"step": 4})
        assert len(calls) == 2
        assert [r["step"] for r in head.reports()] == [4]


def test_report_goes_to_the_head_that_leads_among_several(
    worker_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """TORUS_REPORT_URL lists one URL per head: a head that is gone gives way to the next at once, and the one that
    answered is tried first from then on."""
    with socket.socket() as sock:  # A port nothing listens on: the head that died.
        sock.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{sock.getsockname()[1]}/api/v0/runs/{RUN_ID}/report"
    with running_head() as head:
        monkeypatch.setenv("TORUS_REPORT_URL", f"{gone},{head.url}")
        torus_train.report({"step": 1})
        torus_train.report({"step": 2})
        assert [r["step"] for r in head.reports()] == [1, 2]
        assert os.environ["TORUS_REPORT_URL"] == f"{head.url},{gone}"
    assert "retrying in" not in capsys.readouterr().err


@pytest.mark.parametrize("status", [400, 409, 500])
def test_report_error_status_raises_with_head_message(worker_env: Path, fake_head: FakeHead, status: int) -> None:
    fake_head.responses.append((status, {"error": "step 3 is older than committed step 10"}))

    with pytest.raises(RuntimeError, match=rf"HTTP {status}\): step 3 is older than committed step 10"):
        torus_train.report({"step": 3})
    assert len(fake_head.requests) == 1, "errors other than 502/503/504 are not retried"


def test_report_wrong_token_is_an_error(worker_env: Path, fake_head: FakeHead, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORUS_RUN_TOKEN", "stale")
    with pytest.raises(RuntimeError, match="HTTP 401.*wrong run token"):
        torus_train.report({"step": 1})


def test_report_standalone_prints_and_ignores_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "model.pt").write_text("w")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    torus_train.report({"step": 5, "loss": 0.125}, checkpoint_dir=str(source))
    torus_train.report({"loss": 0.1})

    out = capsys.readouterr().out.splitlines()
    assert out == ['torus_train: step 5: {"step": 5, "loss": 0.125}', 'torus_train: step 6: {"loss": 0.1}']
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not torus_train.in_torus_run()
    with pytest.raises(TypeError):
        torus_train.report({"loss": object()})


# ---------------------------------------------------------------------------------------------------------------
# get_context(), get_checkpoint()


def test_get_context_from_env(worker_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORUS_SLICE_ID", "3")
    monkeypatch.setenv("NODE_RANK", "4")
    ctx = torus_train.get_context()
    assert ctx == torus_train.Context(
        run_id=RUN_ID,
        run_name="my-run",
        attempt=2,
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=4,
        slice_id=3,
        storage_path=str(worker_env),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.rank = 0  # type: ignore[misc]


def test_get_context_without_slice_id(worker_env: Path) -> None:
    assert torus_train.get_context().slice_id is None


def test_get_context_standalone() -> None:
    assert torus_train.get_context() == torus_train.Context(
        run_id="",
        run_name="",
        attempt=1,
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        slice_id=None,
        storage_path=None,
    )


def test_get_context_torch_env_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under plain torchrun (no TORUS_* variables) the torch variables describe the rank."""
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    ctx = torus_train.get_context()
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (3, 4, 1, 2)


def test_get_context_rejects_non_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORUS_ATTEMPT", "two")
    with pytest.raises(RuntimeError, match="TORUS_ATTEMPT='two' is not an integer"):
        torus_train.get_context()


def test_get_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torus_train.get_checkpoint() is None
    monkeypatch.setenv("TORUS_CHECKPOINT_DIR", "")
    assert torus_train.get_checkpoint() is None
    monkeypatch.setenv("TORUS_CHECKPOINT_DIR", "/storage/run/checkpoint_20")
    assert torus_train.get_checkpoint() == "/storage/run/checkpoint_20"


# ---------------------------------------------------------------------------------------------------------------
# jax_initialize(), torch_backend()


def fake_jax(calls: List[Dict[str, object]]) -> types.ModuleType:
    module = types.ModuleType("jax")
    module.distributed = types.SimpleNamespace(initialize=lambda **kwargs: calls.append(kwargs))  # type: ignore
    return module


def test_jax_initialize_passes_env(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[Dict[str, object]] = []
    monkeypatch.setitem(sys.modules, "jax", fake_jax(calls))
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.2:8476")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "8")
    monkeypatch.setenv("JAX_PROCESS_ID", "5")

    torus_train.jax_initialize(local_device_ids=[0, 1])

    assert calls == [
        {"coordinator_address": "10.0.0.2:8476", "num_processes": 8, "process_id": 5, "local_device_ids": [0, 1]}
    ]


def test_jax_initialize_needs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", fake_jax([]))
    with pytest.raises(RuntimeError, match="needs JAX_COORDINATOR_ADDRESS"):
        torus_train.jax_initialize()


def test_jax_initialize_without_jax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)  # Makes `import jax` raise ImportError.
    with pytest.raises(RuntimeError, match="needs JAX, which cannot be imported"):
        torus_train.jax_initialize()


def test_torch_backend_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert torus_train.torch_backend() == "gloo"


def test_torch_backend_follows_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    for available, expected in ((True, "nccl"), (False, "gloo")):
        torch_module = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda a=available: a))
        monkeypatch.setitem(sys.modules, "torch", torch_module)
        assert torus_train.torch_backend() == expected


# ---------------------------------------------------------------------------------------------------------------
# examples/train_torch.py as a two-rank gang run


def torch_import_error() -> Optional[str]:
    """Why torch cannot be used here, or None. Checked in a child so this process stays light."""
    result = subprocess.run(
        [sys.executable, "-c", "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode == 0:
        return None
    lines = (result.stderr.strip() or "unknown error").splitlines()
    return lines[-1]


TORCH_ERROR = torch_import_error()
requires_torch = pytest.mark.skipif(
    TORCH_ERROR is not None, reason=f"torch with gloo is not importable by {sys.executable}: {TORCH_ERROR}"
)

EXAMPLE = REPO / "examples" / "train_torch.py"
WORLD_SIZE = 2
STEPS = 20
CHECKPOINT_EVERY = 5
GANG_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass
class Worker:
    rank: int
    process: subprocess.Popen
    log: Path

    @property
    def output(self) -> str:
        return self.log.read_text()


def start_gang(
    head: FakeHead, storage: Path, attempt: int, args: List[str], checkpoint_dir: str = ""
) -> List[Worker]:
    """Starts one example process per rank with the environment the head gives its workers."""
    master_port = str(free_port())
    workers = []
    for rank in range(WORLD_SIZE):
        env = subprocess_env(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(WORLD_SIZE),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(WORLD_SIZE),
                "NODE_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": master_port,
                "TORUS_RUN_ID": RUN_ID,
                "TORUS_RUN_NAME": storage.name,
                "TORUS_ATTEMPT": str(attempt),
                "TORUS_RANK": str(rank),
                "TORUS_WORLD_SIZE": str(WORLD_SIZE),
                "TORUS_LOCAL_RANK": str(rank),
                "TORUS_STORAGE_PATH": str(storage),
                "TORUS_CHECKPOINT_DIR": checkpoint_dir,
                "TORUS_REPORT_URL": head.url,
                "TORUS_RUN_TOKEN": RUN_TOKEN,
            }
        )
        log = storage.parent / f"attempt_{attempt}_rank_{rank}.log"
        with open(log, "w") as out:
            command = [sys.executable, str(EXAMPLE), *args]
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=storage.parent)
        workers.append(Worker(rank, process, log))
    return workers


def wait_gang(workers: List[Worker], timeout: float = GANG_TIMEOUT_S) -> List[int]:
    """Waits for every worker; like the head, stops the rest (SIGTERM, then SIGKILL) once one exits non-zero."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [w.process.poll() for w in workers]
        if all(code is not None for code in codes):
            return codes  # type: ignore[return-value]
        if any(code not in (None, 0) for code in codes) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
    if time.monotonic() > deadline:
        logs = "\n".join(f"--- rank {w.rank}\n{w.output}" for w in workers)
        pytest.fail(f"gang did not finish within {timeout} s:\n{logs}")
    return [w.process.returncode for w in workers]


def run_gang(head: FakeHead, storage: Path, attempt: int, args: List[str], checkpoint_dir: str = "") -> List[Worker]:
    workers = start_gang(head, storage, attempt, args, checkpoint_dir)
    codes = wait_gang(workers)
    logs = "\n".join(f"--- rank {w.rank}\n{w.output}" for w in workers)
    assert codes == [0] * WORLD_SIZE, f"exit codes {codes}:\n{logs}"
    return workers


def final_loss(worker: Worker) -> str:
    match = re.search(r"^final loss: (\d+\.\d{6})$", worker.output, re.MULTILINE)
    assert match, f"no final loss in rank {worker.rank}'s output:\n{worker.output}"
    return match.group(1)


def new_storage(tmp_path: Path, name: str) -> Path:
    storage = tmp_path / name / "storage" / name
    storage.mkdir(parents=True)
    return storage


TRAIN_ARGS = ["--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY)]


@dataclasses.dataclass
class GangRun:
    workers: List[Worker]
    reports: List[Dict[str, Any]]
    storage: Path


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> GangRun:
    """One uninterrupted two-rank run of the example."""
    storage = new_storage(tmp_path_factory.mktemp("undisturbed"), "ddp-run")
    with running_head() as head:
        workers = run_gang(head, storage, 1, TRAIN_ARGS)
    return GangRun(workers, head.reports(), storage)


@requires_torch
def test_example_ddp_run(undisturbed: GangRun) -> None:
    workers = undisturbed.workers
    for worker in workers:
        assert f"world_size check: all_reduce={WORLD_SIZE} WORLD_SIZE={WORLD_SIZE}" in worker.output
        assert "resumed from step" not in worker.output
    loss = float(final_loss(workers[0]))
    assert 0 < loss < 10
    assert "final loss" not in workers[1].output
    assert re.search(rf"^step {STEPS} loss \d+\.\d+$", workers[0].output, re.MULTILINE)

    reports = undisturbed.reports
    for rank in range(WORLD_SIZE):
        mine = [r for r in reports if r["rank"] == rank]
        assert [r["step"] for r in mine] == list(range(1, STEPS + 1))
        assert all(r["attempt"] == 1 and isinstance(r["metrics"]["loss"], float) for r in mine)
        checkpoints = {r["step"]: r["checkpoint"] for r in mine if r["checkpoint"] is not None}
        expected = range(CHECKPOINT_EVERY, STEPS + 1, CHECKPOINT_EVERY) if rank == 0 else []
        assert sorted(checkpoints) == list(expected)
        for step, path in checkpoints.items():
            assert path == str(undisturbed.storage / ".staging" / "attempt_1" / f"step_{step}" / "rank_0")
            assert os.listdir(path) == ["model.pt"]
    # All ranks report the same (all-reduced) loss for a step.
    losses = {(r["step"], r["rank"]): r["metrics"]["loss"] for r in reports}
    assert all(losses[(s, 0)] == losses[(s, 1)] for s in range(1, STEPS + 1))


@requires_torch
def test_example_resumes_to_same_final_loss(undisturbed: GangRun, tmp_path: Path) -> None:
    storage = new_storage(tmp_path, "ddp-run")
    fail_at = 2 * CHECKPOINT_EVERY + 3
    with running_head() as head:
        # Attempt 1: rank 1 crashes just before step 13; the rest of the gang is stopped.
        workers = start_gang(head, storage, 1, [*TRAIN_ARGS, "--fail-at-step", str(fail_at), "--fail-rank", "1"])
        codes = wait_gang(workers)
        assert codes[1] == 1, workers[1].output
        assert codes[0] != 0, workers[0].output
        assert f"failing at step {fail_at} on rank 1, attempt 1" in workers[1].output

        step = head.last_complete_checkpoint_step(attempt=1, world_size=WORLD_SIZE)
        assert step == 2 * CHECKPOINT_EVERY
        checkpoint = commit(storage, attempt=1, step=step, world_size=WORLD_SIZE)
        assert sorted(os.listdir(checkpoint)) == [".torus_committed", "model.pt"]

        # Attempt 2 starts from the committed checkpoint; the failure is set for attempt 1 only.
        resumed = run_gang(
            head,
            storage,
            2,
            [*TRAIN_ARGS, "--fail-at-step", str(fail_at), "--fail-rank", "1"],
            checkpoint_dir=str(checkpoint),
        )
        attempt_2 = [r for r in head.reports() if r["attempt"] == 2]

    for worker in resumed:
        assert f"resumed from step {step}" in worker.output
    assert final_loss(resumed[0]) == final_loss(undisturbed.workers[0])
    assert sorted({r["step"] for r in attempt_2}) == list(range(step + 1, STEPS + 1))
    # The resumed run's per-step losses match the undisturbed run's bit for bit.
    before = {(r["step"], r["rank"]): r["metrics"]["loss"] for r in undisturbed.reports}
    assert all(r["metrics"]["loss"] == before[(r["step"], r["rank"])] for r in attempt_2)
    staged = storage / ".staging" / "attempt_2" / f"step_{STEPS}" / "rank_0" / "model.pt"
    assert staged.is_file()
