"""JaxTrainer and JaxConfig (Ray Train V2's `ray.train.v2.jax`).

As Ray's `_JaxBackend`: with `use_tpu` (or `use_gpu`) every worker calls
`jax.distributed.initialize(coordinator, num_processes, process_id)` before the function runs — the coordinator is
rank 0's host, the process id the worker's rank — and `jax.distributed.shutdown()` after it; `JAX_PLATFORMS` is set to
"tpu" ("cuda") unless the worker's environment already names platforms (on simulated slices a script sets
`JAX_PLATFORMS=cpu` in `RunConfig(worker_runtime_env={"env_vars": ...})`, as it would under Ray). Without either,
JAX is left alone. A multislice run's workers carry `MEGASCALE_COORDINATOR_ADDRESS` (rank 0's host),
`MEGASCALE_NUM_SLICES`, `MEGASCALE_SLICE_ID` and `MEGASCALE_PORT`, as Ray sets them.

    JaxTrainer(train_loop, scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                                        num_workers=4)).fit()     # one worker per host
"""

from dataclasses import dataclass

from torus.train._trainer import DataParallelTrainer


@dataclass
class JaxConfig:
    """`use_tpu` / `use_gpu`: which platform jax.distributed is initialized for (default: the ScalingConfig's)."""

    use_tpu: bool = False
    use_gpu: bool = False

    def to_dict(self):
        return {"use_tpu": self.use_tpu, "use_gpu": self.use_gpu}


class JaxTrainer(DataParallelTrainer):
    """Runs `train_loop_per_worker` on every worker of a gang run with JAX's distributed runtime set up."""

    _kind = "jax"

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, jax_config=None, scaling_config=None,
                 dataset_config=None, run_config=None, datasets=None, validation_config=None):
        if jax_config is not None and not isinstance(jax_config, JaxConfig):
            raise ValueError(f"Invalid `JaxConfig` type: {jax_config.__class__}. Use `ray.train.v2.jax.JaxConfig`.")
        if jax_config is None and scaling_config is not None:
            jax_config = JaxConfig(use_tpu=scaling_config.use_tpu, use_gpu=scaling_config.use_gpu)
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=jax_config or JaxConfig(), scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, dataset_config=dataset_config,
                         validation_config=validation_config)

    def _setup(self):
        return self._kind, self._backend_config.to_dict()
