"""The worker of a trainer's run: `python3 -m torus.train._entry`. Loads the function the trainer packed (from the
run's py_modules package, first on PYTHONPATH), sets up the framework's process group, runs the function with its
config, and tears the group down. An exception in the function ends this worker with code 1 and its traceback in
the log, which fails the attempt (and restarts it while max_failures allows)."""

import inspect
import os
import pickle
import sys
import traceback

from torus.train._trainer import PACKAGE_DIR, PAYLOAD


def _load_payload():
    for entry in sys.path:
        candidate = os.path.join(entry or ".", PACKAGE_DIR, PAYLOAD)
        if os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                return pickle.load(f)
    raise RuntimeError(f"the trainer's package ({PACKAGE_DIR}/{PAYLOAD}) is on no PYTHONPATH entry: {sys.path}")


def _call(loop, config):
    try:
        params = inspect.signature(loop).parameters
    except (TypeError, ValueError):
        params = {"config": None}
    if len(params) == 0:
        return loop()
    return loop(config if config is not None else {})


def _torch_setup(options):
    import datetime

    import torch.distributed as dist
    import torus_train
    backend = options.get("backend") or torus_train.torch_backend()
    timeout = datetime.timedelta(seconds=options.get("timeout_s", 1800))
    dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)

    def teardown():
        if dist.is_initialized():
            dist.destroy_process_group()
    return teardown


def _jax_setup(options):
    try:
        import jax  # noqa: F401
    except ImportError:
        print("[torus] jax is not installed here: jax.distributed is not initialized (JAX_COORDINATOR_ADDRESS, "
              "JAX_NUM_PROCESSES and JAX_PROCESS_ID are set)", file=sys.stderr, flush=True)
        return lambda: None
    import torus_train
    torus_train.jax_initialize()

    def teardown():
        import jax
        jax.distributed.shutdown()
    return teardown


_SETUPS = {"plain": lambda options: (lambda: None), "torch": _torch_setup, "jax": _jax_setup}


def main():
    payload = _load_payload()
    teardown = _SETUPS[payload["kind"]](payload.get("options") or {})
    try:
        _call(payload["loop"], payload["config"])
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    teardown()
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    main()
