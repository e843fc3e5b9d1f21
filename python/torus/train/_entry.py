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
    backend = options.get("backend") or "gloo"
    if backend == "tpu_dist":
        # As Ray's TPU device manager: the backend comes with torch_tpu, loaded before the group is made.
        try:
            import torch_tpu._loader
        except ImportError as e:
            raise ImportError("The `torch_tpu` module is required to use PyTorch TPU distributed training. Please "
                              "install it or ensure it is available in your environment. (To train on the CPU "
                              "instead, give TorchTrainer(torch_config=TorchConfig(backend=\"gloo\")).)") from e
        torch_tpu._loader.load()
    timeout = datetime.timedelta(seconds=options.get("timeout_s", 1800))
    dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)

    def teardown():
        if dist.is_initialized():
            dist.destroy_process_group()
    return teardown


def _jax_setup(options):
    """As Ray's _JaxBackend: nothing without use_tpu/use_gpu; else JAX_PLATFORMS defaults to the platform and
    jax.distributed.initialize(coordinator, num_processes, process_id) runs before the function."""
    use_tpu, use_gpu = options.get("use_tpu", False), options.get("use_gpu", False)
    if not use_tpu and not use_gpu:
        return lambda: None
    platforms = os.environ.get("JAX_PLATFORMS", "").lower()
    if not platforms:
        platforms = "tpu" if use_tpu else "cuda"
        os.environ["JAX_PLATFORMS"] = platforms
    try:
        import jax
    except ImportError as e:
        raise ImportError(f"JaxTrainer needs jax on every worker, and this worker's Python ({sys.executable}) cannot "
                          f"import it: {e}") from e
    import torus_train
    listed = platforms.split(",")
    if "cuda" in listed and "tpu" not in listed:
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        torus_train.jax_initialize(local_device_ids=list(range(len(gpus))) if gpus else 0)
    elif any(p in listed for p in ("tpu", "cuda", "cpu")):
        torus_train.jax_initialize()

    def teardown():
        try:
            jax.distributed.shutdown()
        except Exception as e:  # noqa: BLE001 - as Ray: a failed shutdown is reported, the run's result stands
            print(f"[torus] jax.distributed.shutdown() failed: {e}", file=sys.stderr, flush=True)
    return teardown


_SETUPS = {"plain": lambda options: (lambda: None), "torch": _torch_setup, "jax": _jax_setup}


def _configure_logging():
    import logging
    level = os.environ.get("TORUS_TRAIN_LOG_LEVEL")
    if level:
        logging.basicConfig(level=level)


def main():
    payload = _load_payload()
    _configure_logging()
    try:
        teardown = _SETUPS[payload["kind"]](payload.get("options") or {})
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
