"""JaxTrainer: each worker calls jax.distributed.initialize() (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID from the placement; the TPU_* and MEGASCALE_* variables of its slice) before the function runs.

    JaxTrainer(train_loop, scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E",
                                                        topology="4x4")).fit()     # 4 workers, one per host
"""

from torus.train._trainer import DataParallelTrainer


class JaxTrainer(DataParallelTrainer):
    _kind = "jax"
