"""Worker-side helper for torus gang training runs.

A torus run starts one worker process per rank and describes the run in the environment. This module reads that
environment, reports metrics and checkpoints back to the head, and sets up the distributed frameworks. It uses only
the standard library, so it works in any Python 3.8+ environment; put the directory holding it on PYTHONPATH (the
head does this for its workers).

Typical use in a training script::

    import torus_train

    ctx = torus_train.get_context()
    torch.distributed.init_process_group(backend=torus_train.torch_backend())   # or torus_train.jax_initialize()

    start = 0
    ckpt = torus_train.get_checkpoint()
    if ckpt is not None:
        state = torch.load(os.path.join(ckpt, "model.pt"))
        start = state["step"]
    for step in range(start + 1, num_steps + 1):
        loss = train_one_step(step)
        if step % 10 == 0 and ctx.rank == 0:
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({...}, os.path.join(tmp, "model.pt"))
                torus_train.report({"step": step, "loss": loss}, checkpoint_dir=tmp)
        else:
            torus_train.report({"step": step, "loss": loss})

Checkpoints: report() copies ``checkpoint_dir`` into ``$TORUS_STORAGE_PATH/.staging/attempt_<a>/step_<s>/rank_<r>/``
before it returns, so the caller may delete its directory afterwards. Once every rank has reported step ``s``, the
head merges the staged directories of that step into ``$TORUS_STORAGE_PATH/checkpoint_<s>/`` (on a name clash the
lower rank's file wins) and marks it committed. When a failed run restarts, every worker of the new attempt finds the
newest committed checkpoint through get_checkpoint(). Every rank must report every step it wants committed, with or
without a checkpoint of its own.

Outside a torus run (no ``TORUS_REPORT_URL``) report() prints the metrics and ignores checkpoints, get_checkpoint()
returns None and get_context() describes a single-process run, so the same script also runs standalone.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

__all__ = [
    "Context",
    "get_checkpoint",
    "get_context",
    "in_torus_run",
    "jax_initialize",
    "report",
    "torch_backend",
]

#: Retries after the first try when the head cannot be reached or answers 502/503/504.
REPORT_RETRIES = 5
#: Delay before the first retry, in seconds; it doubles with every further retry.
REPORT_BACKOFF_S = 0.5
#: Timeout of one report request, in seconds.
REPORT_TIMEOUT_S = 30.0

_TRANSIENT_HTTP_STATUS = (502, 503, 504)

# Step used by report() calls whose metrics carry no "step"; the first such call reports step 1.
_last_step = 0


@dataclass(frozen=True)
class Context:
    """Where this worker sits in the run. Outside a torus run: rank 0 of 1, attempt 1, empty ids."""

    run_id: str
    run_name: str
    attempt: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    slice_id: Optional[int]
    storage_path: Optional[str]


def _env(name: str) -> Optional[str]:
    """The variable's value, or None when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else None


def _env_int(*names: str, default: Optional[int]) -> Optional[int]:
    """The first of names that is set, as an int; default when none is."""
    for name in names:
        value = _env(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise RuntimeError(f"environment variable {name}={value!r} is not an integer") from None
    return default


def _required_int(*names: str, default: int) -> int:
    value = _env_int(*names, default=default)
    assert value is not None
    return value


def in_torus_run() -> bool:
    """True when this process is a worker of a torus run (the head gave it a report URL)."""
    return _env("TORUS_REPORT_URL") is not None


def get_context() -> Context:
    """The run's description, read from the environment the head sets for each worker."""
    return Context(
        run_id=os.environ.get("TORUS_RUN_ID", ""),
        run_name=os.environ.get("TORUS_RUN_NAME", ""),
        attempt=_required_int("TORUS_ATTEMPT", default=1),
        rank=_required_int("TORUS_RANK", "RANK", default=0),
        world_size=_required_int("TORUS_WORLD_SIZE", "WORLD_SIZE", default=1),
        local_rank=_required_int("TORUS_LOCAL_RANK", "LOCAL_RANK", default=0),
        local_world_size=_required_int("LOCAL_WORLD_SIZE", default=1),
        node_rank=_required_int("NODE_RANK", default=0),
        slice_id=_env_int("TORUS_SLICE_ID", default=None),
        storage_path=_env("TORUS_STORAGE_PATH"),
    )


def get_checkpoint() -> Optional[str]:
    """The directory of the newest committed checkpoint, or None on a fresh start or outside a torus run."""
    return _env("TORUS_CHECKPOINT_DIR")


def _step_of(metrics: Mapping[str, Any]) -> int:
    """metrics["step"] when present, else one past the last reported step."""
    if "step" not in metrics:
        return _last_step + 1
    step = metrics["step"]
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f'metrics["step"] must be an int, got {step!r} ({type(step).__name__})')
    if step < 0:
        raise ValueError(f'metrics["step"] must be >= 0, got {step}')
    return step


def _reject_unserialisable(value: Any) -> Any:
    hint = " (call .item() on scalar tensors/arrays)" if hasattr(value, "item") else ""
    raise TypeError(f"metrics must be JSON-serialisable; {type(value).__name__} value {value!r} is not{hint}")


def _encode_metrics(metrics: Any) -> str:
    """metrics as JSON text; TypeError when they are not a JSON-serialisable dict."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
    try:
        return json.dumps(dict(metrics), default=_reject_unserialisable, allow_nan=False)
    except ValueError as error:
        if "Circular reference" in str(error):
            raise TypeError(f"metrics must be JSON-serialisable: {error}") from None
        bad = _non_finite_path(metrics)
        raise TypeError(f"metrics must be JSON-serialisable; non-finite float (NaN/Infinity) at {bad}") from None
    except TypeError as error:
        if str(error).startswith("metrics must be"):
            raise
        raise TypeError(f"metrics must be JSON-serialisable: {error}") from None


def _non_finite_path(value: Any, prefix: str = "metrics") -> str:
    """Path of the first non-finite float inside value, for the error message."""
    if isinstance(value, float) and not math.isfinite(value):
        return prefix
    if isinstance(value, Mapping):
        items = ((f"{prefix}[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{prefix}[{i}]", v) for i, v in enumerate(value))
    else:
        return ""
    for path, item in items:
        found = _non_finite_path(item, path)
        if found:
            return found
    return ""


def _stage_checkpoint(checkpoint_dir: str, ctx: Context, step: int) -> str:
    """Copies checkpoint_dir to the run's staging area for this attempt, step and rank; returns the copy's path."""
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"checkpoint_dir {checkpoint_dir!r} is not a directory")
    if not ctx.storage_path:
        raise RuntimeError("TORUS_STORAGE_PATH is not set; the head must provide it to stage checkpoints")
    step_dir = os.path.join(ctx.storage_path, ".staging", f"attempt_{ctx.attempt}", f"step_{step}")
    target = os.path.join(step_dir, f"rank_{ctx.rank}")
    partial = os.path.join(step_dir, f".rank_{ctx.rank}.partial-{os.getpid()}")
    os.makedirs(step_dir, exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(checkpoint_dir, partial)
    # Copy first, then rename: the head never sees a half-written rank directory.
    if os.path.lexists(target):
        shutil.rmtree(target)
    os.rename(partial, target)
    return os.path.abspath(target)


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, dict) and "error" in parsed:
        return str(parsed["error"])
    return text


def _post(url: str, token: Optional[str], body: bytes) -> bytes:
    """POSTs body once; returns the response body of a 2xx answer, raises urllib/http errors otherwise."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    context = None
    if url.startswith("https://"):
        # The head's certificate is the cluster CA's: its agent gives workers the CA's file as TORUS_TLS_CA.
        context = ssl.create_default_context(cafile=_env("TORUS_TLS_CA"))
    with urllib.request.urlopen(request, timeout=REPORT_TIMEOUT_S, context=context) as response:
        return response.read()


def _post_with_retries(urls: str, token: Optional[str], body: bytes) -> bytes:
    """POSTs body to the first of ``urls`` (comma-separated: one per head of the cluster) that takes it, retrying
    unreachable heads and 502/503/504 answers in rounds over every URL, with exponential backoff between rounds."""
    candidates = [u for u in urls.split(",") if u]
    delay = REPORT_BACKOFF_S
    for tries_left in range(REPORT_RETRIES, -1, -1):
        problems = []
        for url in candidates:
            try:
                answer = _post(url, token, body)
            except urllib.error.HTTPError as error:
                message = _error_message(error.read())
                if error.code not in _TRANSIENT_HTTP_STATUS:
                    raise RuntimeError(f"torus head rejected the report (HTTP {error.code}): {message}") from None
                problems.append(f"{url}: HTTP {error.code}: {message}")
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
                problems.append(f"{url}: {getattr(error, 'reason', error)}")
                continue
            # The head that answered goes first next time.
            candidates.remove(url)
            candidates.insert(0, url)
            os.environ["TORUS_REPORT_URL"] = ",".join(candidates)
            return answer
        if tries_left == 0:
            raise ConnectionError(
                f"cannot reach the torus head after {REPORT_RETRIES + 1} tries: {'; '.join(problems)}")
        print(f"torus_train: report failed ({'; '.join(problems)}); retrying in {delay:g} s", file=sys.stderr,
              flush=True)
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def report(metrics: Dict[str, Any], checkpoint_dir: Optional[str] = None) -> None:
    """Reports this rank's metrics for one step to the head, with an optional checkpoint directory.

    The step is ``metrics["step"]`` when given, else one past this process's previous report (the first is step 1).
    ``metrics`` must be a JSON-serialisable dict (TypeError otherwise; NaN and Infinity are not JSON). With
    ``checkpoint_dir``, its contents are copied into the run's staging area before the report is sent, so the
    directory may be removed once report() returns. Connection errors and 502/503/504 answers are retried
    REPORT_RETRIES times with exponential backoff; a ConnectionError follows when the head stays unreachable, and a
    RuntimeError carrying the head's message when it rejects the report.

    Outside a torus run the metrics are printed and the checkpoint is ignored.
    """
    global _last_step
    encoded = _encode_metrics(metrics)
    step = _step_of(metrics)
    url = _env("TORUS_REPORT_URL")
    if url is None:
        print(f"torus_train: step {step}: {encoded}", flush=True)
        _last_step = step
        return
    ctx = get_context()
    staged = _stage_checkpoint(checkpoint_dir, ctx, step) if checkpoint_dir is not None else None
    body = {
        "rank": ctx.rank,
        "attempt": ctx.attempt,
        "step": step,
        "metrics": json.loads(encoded),
        "checkpoint": staged,
    }
    _post_with_retries(url, _env("TORUS_RUN_TOKEN"), json.dumps(body).encode("utf-8"))
    _last_step = step


def jax_initialize(**kwargs: Any) -> None:
    """Calls jax.distributed.initialize() with the coordinator, process count and process id torus exported.

    Extra keyword arguments (for example ``local_device_ids``) are passed through. JAX itself reads
    ``JAX_LOCAL_DEVICE_IDS``; ``JAX_PLATFORMS`` is left as the head set it.
    """
    try:
        import jax
    except ImportError as error:
        raise RuntimeError(f"jax_initialize() needs JAX, which cannot be imported here: {error}") from error
    coordinator = _env("JAX_COORDINATOR_ADDRESS")
    num_processes = _env_int("JAX_NUM_PROCESSES", default=None)
    process_id = _env_int("JAX_PROCESS_ID", default=None)
    if coordinator is None or num_processes is None or process_id is None:
        raise RuntimeError(
            "jax_initialize() needs JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID, which torus sets "
            "for the workers of a run; outside a torus run call jax.distributed.initialize() yourself or skip it"
        )
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id, **kwargs
    )


def torch_backend() -> str:
    """The torch.distributed backend for this worker: "nccl" when CUDA is available, else "gloo"."""
    try:
        import torch
    except ImportError:
        return "gloo"
    return "nccl" if torch.cuda.is_available() else "gloo"
