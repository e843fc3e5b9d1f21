"""torus.train: run a training function on every worker of a gang run (Ray Train's names).

    from torus.train import ScalingConfig, RunConfig, FailureConfig
    from torus.train.torch import TorchTrainer

    def train_loop(config):
        ctx = torus.train.get_context()        # ranks, sizes, the run
        ...
        torus.train.report({"loss": loss}, checkpoint=torus.train.Checkpoint.from_directory(d))

    result = TorchTrainer(train_loop, train_loop_config={"lr": 0.1},
                          scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                                       num_workers=4),
                          run_config=RunConfig(failure_config=FailureConfig(max_failures=2))).fit()
    print(result.metrics, result.checkpoint)

The run is a gang run (docs/training.md): whole slices, identity from the placement, every worker restarted from
the newest committed checkpoint after any failure.
"""

from torus.train._checkpoint import Checkpoint
from torus.train._config import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
from torus.train._session import TrainContext, get_checkpoint, get_context, report
from torus.train._trainer import DataParallelTrainer, Result, TrainingFailedError


def __getattr__(name):
    # TorchTrainer and JaxTrainer also here, imported when asked for (torch is heavy).
    if name == "TorchTrainer":
        from torus.train.torch import TorchTrainer
        return TorchTrainer
    if name == "JaxTrainer":
        from torus.train.jax import JaxTrainer
        return JaxTrainer
    raise AttributeError(f"module 'torus.train' has no attribute {name!r}")


__all__ = ["Checkpoint", "CheckpointConfig", "DataParallelTrainer", "FailureConfig", "JaxTrainer", "LoggingConfig",
           "Result",
           "RunConfig", "ScalingConfig", "TorchTrainer", "TrainContext", "TrainingFailedError", "get_checkpoint",
           "get_context", "report"]
