"""`ray.train.v2.api.config`: ScalingConfig, RunConfig, FailureConfig, CheckpointConfig, LoggingConfig."""

from torus.train._config import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig

__all__ = ["CheckpointConfig", "FailureConfig", "LoggingConfig", "RunConfig", "ScalingConfig"]
