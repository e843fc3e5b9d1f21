"""Data-parallel JAX training on a TPU slice with Ray Train's JaxTrainer — a Ray program, run unchanged by torus.

    python examples/train_jax.py                      # ray.init(): a local cluster (no TPUs: --num-slices 0)
    python examples/train_jax.py --address auto       # the cluster this machine runs (`torus up`, `ray start`)

Every worker is one host of a v6e 4x4 slice (`num_workers=4` per slice). The trainer calls
`jax.distributed.initialize()` on each before the loop runs, so `jax.process_count()` is the number of hosts and
`jax.devices()` spans every chip of the run. The loop first checks a `jax.lax.psum` over all devices, then fits
y = X·w + b by gradient descent: each device draws its own share of every step's batch and the gradients are
averaged over all devices (`jax.lax.pmean`). Rank 0 saves the parameters every `--checkpoint-every` steps with
`ray.train.report(..., checkpoint=Checkpoint.from_directory(...))`; a restarted run (any worker lost) resumes from
the newest one and ends with exactly the parameters an uninterrupted run ends with.

On simulated slices (no TPU chips) `--platform cpu` makes each host's chips CPU devices: JAX_PLATFORMS=cpu and
`--xla_force_host_platform_device_count=<chips per host>` in the workers' environment, with gloo collectives across
processes. The last line printed is a JSON summary.
"""

import argparse
import hashlib
import json
import os
import tempfile
import time

import ray
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.v2.jax import JaxTrainer

CHIPS_PER_HOST = 4  # v6e 4x4: 4 hosts of 4 chips
FEATURES = 8
PER_DEVICE_BATCH = 16


def train_loop(config):
    import jax
    import jax.numpy as jnp
    import numpy as np

    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        # Collectives across processes on CPU devices (before anything makes JAX's backend).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    ctx = ray.train.get_context()
    if config.get("pid_dir"):
        with open(os.path.join(config["pid_dir"], f"rank{ctx.get_world_rank()}.pid"), "w") as f:
            f.write(str(os.getpid()))

    local, process = jax.local_device_count(), jax.process_index()
    # Every device holds its process index + 1; the sum over all devices is known in closed form.
    ones = np.full((local,), float(process + 1), dtype=np.float32)
    psum = float(jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(ones)[0])
    expected_psum = float(sum((p + 1) * local for p in range(jax.process_count())))

    w_true = np.linspace(-1.0, 1.0, FEATURES).astype(np.float32)
    b_true = np.float32(0.5)

    def batch(step, device):
        # Device `device` of the run (0 … device_count-1) draws the same rows at `step` in every attempt.
        rng = np.random.default_rng(step * 100003 + device)
        x = rng.normal(size=(PER_DEVICE_BATCH, FEATURES)).astype(np.float32)
        return x, x @ w_true + b_true

    def loss_fn(params, x, y):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    def update(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, "i")
        params = jax.tree_util.tree_map(lambda p, g: p - config["lr"] * g, params, grads)
        return params, jax.lax.pmean(loss, "i")

    p_update = jax.pmap(update, axis_name="i")
    start = 0
    params = {"w": np.zeros(FEATURES, np.float32), "b": np.float32(0.0)}
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            saved = np.load(os.path.join(d, "params.npz"))
            params = {"w": saved["w"], "b": saved["b"][()]}
            start = int(saved["step"])
        print(f"rank {ctx.get_world_rank()} resumes after step {start}", flush=True)
    replicated = jax.device_put_replicated(params, jax.local_devices())
    first_device = process * local
    for step in range(start + 1, config["steps"] + 1):
        if step == start + 1 and ctx.get_world_rank() == 0:
            # When this attempt's first step began (bench/jax_trainer.py measures from it).
            print(f"first step {step} at {time.time():.3f}", flush=True)
        xs, ys = zip(*(batch(step, first_device + d) for d in range(local)))
        replicated, loss = p_update(replicated, np.stack(xs), np.stack(ys))
        host = jax.tree_util.tree_map(lambda a: np.asarray(a[0]), replicated)
        digest = hashlib.sha256(host["w"].tobytes() + np.float32(host["b"]).tobytes()).hexdigest()[:16]
        metrics = {"step": step, "loss": float(loss[0]), "psum": psum, "expected_psum": expected_psum,
                   "processes": jax.process_count(), "devices": jax.device_count(), "params_digest": digest,
                   "attempt_pid": os.getpid()}
        if step % config["checkpoint_every"] == 0 and ctx.get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                np.savez(os.path.join(d, "params.npz"), w=host["w"], b=host["b"], step=step)
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
            print(f"checkpoint of step {step} reported", flush=True)
        else:
            ray.train.report(metrics)
        time.sleep(config["step_sleep"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="the cluster to join (default: start a local one)")
    parser.add_argument("--num-slices", type=int, default=1, help="v6e 4x4 slices (0: 2 CPU workers, no TPU)")
    parser.add_argument("--platform", default="cpu", help="JAX_PLATFORMS of the workers ('' leaves JAX's choice)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds between steps")
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--name", default=None)
    parser.add_argument("--max-failures", type=int, default=1)
    parser.add_argument("--pid-dir", default=None, help="each worker writes rank<N>.pid here")
    args = parser.parse_args()

    ray.init(address=args.address)
    env = {}
    if args.platform:
        env["JAX_PLATFORMS"] = args.platform
    if args.platform == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={CHIPS_PER_HOST}"
    if args.num_slices > 0:
        scaling = ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                num_workers=4 * args.num_slices)
    else:
        scaling = ScalingConfig(num_workers=2)
    trainer = JaxTrainer(
        train_loop,
        train_loop_config={"steps": args.steps, "checkpoint_every": args.checkpoint_every, "lr": args.lr,
                           "step_sleep": args.step_sleep, "pid_dir": args.pid_dir},
        scaling_config=scaling,
        run_config=RunConfig(name=args.name, storage_path=args.storage_path,
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             worker_runtime_env={"env_vars": env}))
    result = trainer.fit()
    print(json.dumps({"metrics": result.metrics,
                      "checkpoint": result.checkpoint.path if result.checkpoint else None,
                      "attempts": getattr(result, "attempts", None)}))


if __name__ == "__main__":
    main()
