"""DataParallelTrainer: runs a function on every worker of a gang run and waits for the run's end.

fit() packs the function and its config (cloudpickle) as a package, uploads it to the head, and submits a gang run
(the same as `torus train`: whole slices, rank = bundle order, the distributed environment computed from the
placement, every worker restarted from the newest checkpoint after a failure) whose workers run
`python3 -m torus.train._entry`. It prints every rank's output as it comes, prefixed "[rank N] ", and returns a
Result once the run succeeds; a run that fails raises TrainingFailedError with the root cause."""

import datetime
import json
import os
import sys
import tempfile

import cloudpickle

from torus._private import state as _st
from torus._private import worker as _worker
from torus.train._checkpoint import Checkpoint
from torus.train._config import RunConfig, ScalingConfig

# The package's directory name: on the workers' PYTHONPATH, it holds the pickled function (_entry.py reads it).
PACKAGE_DIR = "torus_train_loop"
PAYLOAD = "payload.pkl"


class TrainingFailedError(RuntimeError):
    """The run failed (its failures exceeded max_failures) or was stopped. `result` holds what it reached."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


class Result:
    """What a run reached: `metrics` (rank 0's last report), `checkpoint` (the newest committed one, or None),
    `path` (`<storage_path>/<name>`), `metrics_history` (rank 0's reports of the last attempt), `error`, `run_id`,
    `name`, `attempts`."""

    def __init__(self, run, error=None):
        self.run_id = run.get("run_id")
        self.name = run.get("name")
        self.path = run.get("storage_path")
        attempts = run.get("attempts") or []
        self.attempts = len(attempts)
        self.metrics_history = [m["metrics"] for m in (attempts[-1].get("metrics") or [])] if attempts else []
        self.metrics = self.metrics_history[-1] if self.metrics_history else {}
        checkpoints = run.get("checkpoints") or []
        self.checkpoint = Checkpoint(checkpoints[-1]["dir"]) if checkpoints else None
        # (checkpoint, rank 0's metrics of its step) for every checkpoint kept, oldest first, as Ray's.
        by_step = {m.get("step"): m.get("metrics") or {} for a in attempts for m in (a.get("metrics") or [])}
        self.best_checkpoints = [(Checkpoint(c["dir"]), by_step.get(c.get("step"), {})) for c in checkpoints]
        self.error = error

    def __repr__(self):
        return (f"Result(name={self.name!r}, metrics={self.metrics!r}, checkpoint={self.checkpoint!r}, "
                f"error={self.error!r})")


def _worker_pythonpath():
    # Workers import torus (and its compiled module) from where this driver does, and the driver's own modules from
    # its script's directory and its PYTHONPATH (cloudpickle sends functions of importable modules by name).
    import _torus_core
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [here, os.path.dirname(os.path.abspath(_torus_core.__file__))]
    paths.append(os.path.abspath(sys.path[0]) if sys.path and sys.path[0] else os.getcwd())
    paths.extend(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return os.pathsep.join(dict.fromkeys(paths))


class DataParallelTrainer:
    """Runs `train_loop_per_worker` on every worker of a gang run; `train_loop_config` is passed to it when it takes
    an argument. Subclasses set up a framework's process group around it (TorchTrainer, JaxTrainer)."""

    _kind = "plain"

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, backend_config=None, scaling_config=None,
                 run_config=None, datasets=None, dataset_config=None, validation_config=None, metadata=None,
                 resume_from_checkpoint=None):
        if not callable(train_loop_per_worker):
            raise TypeError(f"train_loop_per_worker: a function is required, got "
                            f"{type(train_loop_per_worker).__name__}")
        if scaling_config is not None and not isinstance(scaling_config, ScalingConfig):
            raise ValueError(f"Invalid `ScalingConfig` type: {scaling_config.__class__}. Use "
                             "`ray.train.ScalingConfig` instead.")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise ValueError(f"Invalid `RunConfig` type: {run_config.__class__}. Use `ray.train.RunConfig` instead.")
        if datasets:
            raise ValueError(f"{type(self).__name__}(datasets=...): Ray Data datasets are not supported; read the "
                             "data inside train_loop_per_worker (each worker its share, by get_context()'s rank)")
        if validation_config is not None:
            raise ValueError(f"{type(self).__name__}(validation_config=...): checkpoint validation is not supported")
        if resume_from_checkpoint is not None or metadata is not None:
            raise DeprecationWarning("`resume_from_checkpoint` and `metadata` are deprecated; a run given the name "
                                     "and storage_path of an earlier one resumes from its newest checkpoint")
        self._loop = train_loop_per_worker
        self._config = train_loop_config
        self._scaling = scaling_config or ScalingConfig(num_workers=1)
        self._run_config = run_config or RunConfig()
        self._backend_config = backend_config

    def _setup(self):
        """What the workers set up before the loop: (kind, options), read by _entry.py."""
        return self._kind, {}

    def _default_name(self):
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        return f"{type(self).__name__.lower()}-{stamp}"

    def _spec(self, package_uri):
        # Unbuffered, so that each rank's lines reach the driver as they are printed and a failing rank's last ones
        # are in its log.
        env = {"PYTHONPATH": _worker_pythonpath(), "PYTHONUNBUFFERED": "1"}
        # One thread per CPU a worker holds unless the driver says otherwise (as Ray sets OMP_NUM_THREADS).
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(max(1, int(self._scaling._cpus_per_worker()))))
        env["TORUS_TRAIN_LOG_LEVEL"] = self._run_config.logging_config.log_level
        user_env = self._run_config._env_vars()
        if "PYTHONPATH" in user_env:
            env["PYTHONPATH"] = os.pathsep.join([user_env.pop("PYTHONPATH"), env["PYTHONPATH"]])
        env.update(user_env)
        return {"scaling_config": self._scaling._spec(),
                "run_config": self._run_config._spec(self._default_name()),
                "entrypoint": [sys.executable, "-m", "torus.train._entry"],
                "env": env,
                "py_modules": [package_uri]}

    def fit(self):
        """Runs the function on every worker until the run ends; returns its Result, or raises TrainingFailedError
        (ValueError for a spec the head refuses, naming the field). Ctrl-C stops the run."""
        state = _worker.state_or_init()
        core = _st.import_core()
        http = _worker.http_address(state)
        kind, options = self._setup()
        payload = cloudpickle.dumps({"loop": self._loop, "config": self._config, "kind": kind, "options": options})
        with tempfile.TemporaryDirectory(prefix="torus-train-") as tmp:
            package = os.path.join(tmp, PACKAGE_DIR)
            os.mkdir(package)
            with open(os.path.join(package, PAYLOAD), "wb") as f:
                f.write(payload)
            uri = core.upload_py_module(http, state.token, package)
        spec = json.dumps(self._spec(uri))
        run_id = None
        try:
            try:
                run_id, name = core.submit_run(http, state.token, spec)
            except ValueError as e:
                raise ValueError(f"{type(self).__name__}: {e}") from None
            print(f"[torus] run {name} submitted as {run_id}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            run = json.loads(core.follow_run(http, state.token, run_id, sys.stdout, sys.stderr))
        except BaseException:
            # Interrupted (Ctrl-C) or the head went away while following: the run does not outlive fit().
            if run_id is not None:
                try:
                    core.stop_run(http, state.token, run_id)
                    print(f"[torus] stopped run {name} ({run_id})", file=sys.stderr, flush=True)
                except Exception as e:  # noqa: BLE001 - the original error matters more
                    print(f"[torus] could not stop run {run_id}: {e}", file=sys.stderr, flush=True)
            raise
        if run["status"] != "SUCCEEDED":
            message = f"run {run['name']} ({run_id}) {run['status']}: {run.get('message', '')}"
            attempts = run.get("attempts") or []
            details = attempts[-1].get("end_details", "") if attempts else ""
            if details:
                message += "\n" + details
            error = TrainingFailedError(message)
            error.result = Result(run, error)
            raise error
        return Result(run)
