"""ScalingConfig, RunConfig, FailureConfig, CheckpointConfig and LoggingConfig (Ray Train V2's names, fields,
defaults and validation messages), and the run spec they make.

A Ray Train script's configs mean here what they mean to Ray: `num_workers` counts workers (for TPUs, one per host
by default, across every slice: two v6e 4x4 slices are `num_workers=8`), the number of slices follows from it, and
`RunConfig.worker_runtime_env["env_vars"]` reaches every worker. torus adds a few fields of its own, all optional:
`chips_per_host` (settles v5e/v6e `2x4`), `fallbacks` (other TPU shapes tried in order) and `num_slices` (when given,
it must agree with `num_workers`)."""

import datetime
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

_DEPRECATED = "DEPRECATED"
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
DEFAULT_STORAGE_PATH = os.path.expanduser("~/ray_results")

TRAINER_RESOURCES_DEPRECATION_MESSAGE = (
    "`ScalingConfig(trainer_resources)` is deprecated. This parameter was an advanced configuration that specified "
    "resources for the Ray Train driver actor, which doesn't exist anymore. If you want to specify resources for "
    "the training function, use the `resources_per_worker` argument instead.")
FAIL_FAST_DEPRECATION_MESSAGE = (
    "`FailureConfig(fail_fast)` is deprecated since it is only relevant in the context of multiple trials running "
    "in Ray Tune. This parameter is still available in `ray.tune.FailureConfig` for passing into a "
    "`ray.tune.Tuner`. See this issue for more context: https://github.com/ray-project/ray/issues/49454")
RUN_CONFIG_DEPRECATION_MESSAGE = (
    "`RunConfig({})` is deprecated. This configuration was a Ray Tune API that did not support Ray Train usage "
    "well, so we are dropping support going forward. If you heavily rely on these configurations, you can run Ray "
    "Train as a single Ray Tune trial. See this issue for more context: "
    "https://github.com/ray-project/ray/issues/49454")


def _tpu_workers_per_slice(topology, accelerator_type, resources_per_worker, chips_per_host):
    from torus.util import _tpu_slice
    return _tpu_slice.get_tpu_worker_resources(topology=topology, accelerator_type=accelerator_type,
                                               resources_per_worker=resources_per_worker, num_slices=1,
                                               chips_per_vm=chips_per_host)


@dataclass
class ScalingConfig:
    """How many workers, on what (Ray Train V2's ScalingConfig).

    TPU: `use_tpu=True` with `accelerator_type` ("TPU-V6E") and `topology` ("4x4") reserves whole slices: by default
    each worker holds one host's chips, so `num_workers` is the number of hosts across all slices (a v6e 4x4 slice
    has 4; `num_workers=8` is two slices); `resources_per_worker={"TPU": 1}` gives one worker per chip instead.
    Otherwise `num_workers` workers of `resources_per_worker` (default {"CPU": 1}, plus {"GPU": 1} with `use_gpu`),
    placed by `placement_strategy`. `label_selector` applies to every worker's host (not with `use_tpu`, as in Ray).
    torus's own optional fields: `chips_per_host`, `fallbacks` (other TPU shapes as dicts {"accelerator_type",
    "topology", "num_slices"}, tried in order), `num_slices` (must agree with `num_workers` when given)."""

    trainer_resources: Optional[dict] = None
    num_workers: Union[int, Tuple[int, int]] = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"
    accelerator_type: Optional[str] = None
    label_selector: Optional[Union[Dict[str, str], List[Dict[str, str]]]] = None
    use_tpu: bool = False
    topology: Optional[str] = None
    elastic_resize_monitor_interval_s: float = 60.0
    num_slices: Optional[int] = None
    chips_per_host: Optional[int] = None
    fallbacks: List[dict] = field(default_factory=list)

    def __post_init__(self):
        if self.trainer_resources is not None:
            raise DeprecationWarning(TRAINER_RESOURCES_DEPRECATION_MESSAGE)
        fixed = isinstance(self.num_workers, int) and not isinstance(self.num_workers, bool)
        elastic = (isinstance(self.num_workers, tuple) and len(self.num_workers) == 2 and
                   all(isinstance(x, int) for x in self.num_workers))
        if not (fixed or elastic):
            raise ValueError("ScalingConfig(num_workers) must be an int or a tuple of two ints.")
        if self.elastic_resize_monitor_interval_s < 0:
            raise ValueError("ScalingConfig(elastic_resize_monitor_interval_s) must be non-negative.")
        if self.min_workers < 0:
            raise ValueError(f"Invalid ScalingConfig(num_workers={self.num_workers}): "
                             "Number of workers cannot be negative.")
        if self.min_workers > self.max_workers:
            raise ValueError(f"Invalid ScalingConfig(num_workers={self.num_workers}): "
                             f"min_workers={self.min_workers} must be <= max_workers={self.max_workers}.")
        self._validate_tpu_config()
        if isinstance(self.label_selector, list) and len(self.label_selector) != self.max_workers:
            raise ValueError("If `label_selector` is a list, it must be the same length as "
                             "`max_workers` (or `num_workers` when fixed).")
        if self.resources_per_worker:
            gpus = self.resources_per_worker.get("GPU", 0)
            if not self.use_gpu and gpus > 0:
                raise ValueError("`use_gpu` is False but `GPU` was found in `resources_per_worker`. Either set "
                                 "`use_gpu` to True or remove `GPU` from `resources_per_worker.")
            if self.use_gpu and gpus == 0:
                raise ValueError("`use_gpu` is True but `GPU` is set to 0 in `resources_per_worker`. Either set "
                                 "`use_gpu` to False or request a positive number of `GPU` in "
                                 "`resources_per_worker.")
        if self.placement_strategy not in _STRATEGIES:
            raise ValueError(f"ScalingConfig(placement_strategy): one of {', '.join(_STRATEGIES)}, got "
                             f"{self.placement_strategy!r}")

    @property
    def elasticity_enabled(self):
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self):
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self):
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    def _validate_tpu_config(self):
        rpw = self.resources_per_worker or {}
        if self.use_gpu and self.use_tpu:
            raise ValueError("Cannot specify both `use_gpu=True` and `use_tpu=True`.")
        if not self.use_tpu and rpw.get("TPU", 0) > 0:
            raise ValueError("`use_tpu` is False but `TPU` was found in `resources_per_worker`. Either set "
                             "`use_tpu` to True or remove `TPU` from `resources_per_worker.")
        if self.use_tpu and "TPU" in rpw and rpw["TPU"] == 0:
            raise ValueError("`use_tpu` is True but `TPU` is set to 0 in `resources_per_worker`. Either set "
                             "`use_tpu` to False or request a positive number of `TPU` in `resources_per_worker.")
        if self.use_tpu and self.max_workers > 1:
            if not self.topology:
                raise ValueError("`topology` must be specified in ScalingConfig when `use_tpu=True`  and "
                                 "`num_workers` > 1.")
            if not self.accelerator_type:
                raise ValueError("`accelerator_type` must be specified in ScalingConfig when `use_tpu=True` and "
                                 "`num_workers` > 1.")
            if self.label_selector:
                raise ValueError("Cannot set `label_selector` when `use_tpu=True` because Ray Train automatically "
                                 "reserves a TPU slice with a predefined label.")
        if self.topology and self.accelerator_type:
            try:
                per_slice, _ = _tpu_workers_per_slice(self.topology, self.accelerator_type, self.resources_per_worker,
                                                      self.chips_per_host)
            except Exception as e:  # noqa: BLE001 - Ray's message wraps whatever the arithmetic raised
                raise ValueError(f"Could not parse TPU topology details for type={self.accelerator_type}, "
                                 f"topology={self.topology}. Error: {e}") from None
            if per_slice > 0 and self.max_workers % per_slice != 0:
                raise ValueError(f"The configured `num_workers` ({self.num_workers}) must be a multiple of "
                                 f"{per_slice} for the specified topology ({self.topology}). TPU workloads "
                                 "typically require symmetric resource distribution across all slices to function "
                                 "correctly.")
            if per_slice > 0 and self.min_workers % per_slice != 0:
                raise ValueError(f"The configured `min_workers` ({self.min_workers}) must be a multiple of "
                                 f"{per_slice} for the specified topology ({self.topology}). TPU workloads "
                                 "typically require symmetric resource distribution across all slices to function "
                                 "correctly.")
            if self.use_tpu and self.num_slices is not None and per_slice * self.num_slices != self.max_workers:
                raise ValueError(f"ScalingConfig(num_slices={self.num_slices}) gives {per_slice * self.num_slices} "
                                 f"workers of {self.topology}, but num_workers is {self.num_workers}; leave "
                                 "num_slices out (it follows from num_workers) or make them agree")

    @property
    def num_tpus_per_worker(self):
        return (self.resources_per_worker or ({"TPU": 1} if self.use_tpu else {})).get("TPU", 0)

    def _spec(self):
        """The run's scaling_config for the head (docs/training.md)."""
        if self.elasticity_enabled:
            raise ValueError(f"ScalingConfig(num_workers={self.num_workers}): a torus run is a fixed gang; give "
                             "num_workers as one int (elastic ranges are not supported)")
        if self.num_workers == 0:
            raise ValueError("ScalingConfig(num_workers=0): torus runs the function on workers of a gang run; "
                             "give num_workers >= 1 (local mode is not supported)")
        if isinstance(self.label_selector, list):
            if any(s != self.label_selector[0] for s in self.label_selector):
                raise ValueError("ScalingConfig(label_selector): one selector holds for every worker of a torus "
                                 "run; give one dict (a list of different selectors is not supported)")
            selector = dict(self.label_selector[0]) if self.label_selector else {}
        else:
            selector = dict(self.label_selector or {})
        spec = {"use_tpu": bool(self.use_tpu), "use_gpu": bool(self.use_gpu),
                "placement_strategy": self.placement_strategy, "label_selector": selector,
                "fallbacks": list(self.fallbacks), "num_workers": self.num_workers}
        accel = self.accelerator_type
        if accel and self.use_tpu and not accel.upper().startswith("TPU-"):
            accel = "TPU-" + accel
        if accel:
            spec["accelerator_type"] = accel.upper() if self.use_tpu else accel
        if self.topology:
            spec["topology"] = self.topology
        if self.chips_per_host is not None:
            spec["chips_per_host"] = self.chips_per_host
        if self.resources_per_worker is not None:
            spec["resources_per_worker"] = dict(self.resources_per_worker)
        if self.use_tpu:
            # The ranks of a TPU run follow the slice's hosts; the strategy is the slice's.
            spec.pop("placement_strategy")
            spec["num_slices"] = self._num_slices()
        return spec

    def _num_slices(self):
        if self.num_slices is not None:
            return self.num_slices
        if not (self.topology and self.accelerator_type):
            return 1
        per_slice, _ = _tpu_workers_per_slice(self.topology, self.accelerator_type, self.resources_per_worker,
                                              self.chips_per_host)
        return max(1, self.max_workers // per_slice)

    def _cpus_per_worker(self):
        return (self.resources_per_worker or {}).get("CPU", 1)


@dataclass
class FailureConfig:
    """`max_failures`: failed attempts that are restarted (every worker again, from the latest checkpoint); 0 none,
    -1 without limit. The other fields are Ray's and accepted; torus's head has no controller to fail and no
    preemption budget apart from max_failures."""

    max_failures: int = 0
    fail_fast: Union[bool, str] = _DEPRECATED
    controller_failure_limit: int = -1
    max_preemption_failures: int = -1
    relax_collectives_on_preemption: bool = False
    preemption_grace_s: float = 0.0

    def __post_init__(self):
        if self.fail_fast != _DEPRECATED:
            raise DeprecationWarning(FAIL_FAST_DEPRECATION_MESSAGE)
        if not isinstance(self.max_failures, int) or isinstance(self.max_failures, bool) or self.max_failures < -1:
            raise ValueError(f"FailureConfig(max_failures): an int >= -1 (-1: no limit), got {self.max_failures!r}")


@dataclass
class CheckpointConfig:
    """`num_to_keep`: the newest committed checkpoints kept (default all). Keeping the best by a score
    (`checkpoint_score_attribute`) is refused: torus keeps the newest."""

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: Any = _DEPRECATED
    checkpoint_at_end: Any = _DEPRECATED

    def __post_init__(self):
        if self.checkpoint_frequency != _DEPRECATED:
            raise DeprecationWarning("`checkpoint_frequency` is deprecated since it does not apply to user-defined "
                                     "training functions. Please remove this argument from your CheckpointConfig.")
        if self.checkpoint_at_end != _DEPRECATED:
            raise DeprecationWarning("`checkpoint_at_end` is deprecated since it does not apply to user-defined "
                                     "training functions. Please remove this argument from your CheckpointConfig.")
        if self.num_to_keep is not None and self.num_to_keep <= 0:
            raise ValueError(f"Received invalid num_to_keep: {self.num_to_keep}. "
                             "Must be None or an integer >= 1.")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(f"Received invalid checkpoint_score_order: {self.checkpoint_score_order}. "
                             "Must be 'max' or 'min'.")


@dataclass
class LoggingConfig:
    """`log_level` of the workers' Python logging (INFO by default)."""

    log_level: str = "INFO"

    def __post_init__(self):
        valid = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
        if not isinstance(self.log_level, str) or self.log_level.upper() not in valid:
            raise ValueError(f"Invalid log_level: {self.log_level!r}. "
                             f"Must be one of: {', '.join(repr(x) for x in sorted(valid))}.")
        self.log_level = self.log_level.upper()


def _date_str():
    return datetime.datetime.today().strftime("%Y-%m-%d_%H-%M-%S")


@dataclass
class RunConfig:
    """`name`: the run's name (default `ray_train_run-<date>_<time>`); a run given the name and storage path of an
    earlier one resumes from its newest checkpoint. `storage_path`: an absolute directory that the head and every
    host see (default ~/ray_results); the run's files go to `<storage_path>/<name>/`. `worker_runtime_env`: what
    every worker runs in ({"env_vars": {...}}). `callbacks` and `storage_filesystem` are refused (no controller
    process calls them; checkpoints go to a directory)."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    storage_filesystem: Any = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    callbacks: Optional[list] = None
    worker_runtime_env: Optional[dict] = None
    logging_config: Optional[LoggingConfig] = None
    sync_config: str = _DEPRECATED
    verbose: str = _DEPRECATED
    stop: str = _DEPRECATED
    progress_reporter: str = _DEPRECATED
    log_to_file: str = _DEPRECATED

    def __post_init__(self):
        if self.storage_path is None:
            self.storage_path = DEFAULT_STORAGE_PATH
        self.storage_path = os.fspath(self.storage_path)
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        self.logging_config = self.logging_config or LoggingConfig()
        for param in ("sync_config", "verbose", "stop", "progress_reporter", "log_to_file"):
            if getattr(self, param) != _DEPRECATED:
                raise DeprecationWarning(RUN_CONFIG_DEPRECATION_MESSAGE.format(param))
        if not self.name:
            self.name = f"ray_train_run-{_date_str()}"
        self.callbacks = self.callbacks or []
        self.worker_runtime_env = self.worker_runtime_env or {}
        if self.callbacks:
            raise ValueError("RunConfig(callbacks): not supported; torus has no controller process to call them "
                             "(watch the run's reports with `torus runs` or the dashboard instead)")
        if self.storage_filesystem is not None:
            raise ValueError("RunConfig(storage_filesystem): not supported; give storage_path, a directory every "
                             "host sees")
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise ValueError(f"Invalid `CheckpointConfig` type: {self.checkpoint_config.__class__}. Use "
                             "`ray.train.CheckpointConfig` instead. See this issue for more context: "
                             "https://github.com/ray-project/ray/issues/49454")
        if not isinstance(self.failure_config, FailureConfig):
            raise ValueError(f"Invalid `FailureConfig` type: {self.failure_config.__class__}. Use "
                             "`ray.train.FailureConfig` instead. See this issue for more context: "
                             "https://github.com/ray-project/ray/issues/49454")
        if not isinstance(self.worker_runtime_env, dict):
            raise ValueError(f"RunConfig(worker_runtime_env): a dict such as {{'env_vars': {{...}}}}, got "
                             f"{type(self.worker_runtime_env).__name__}")
        unknown = sorted(set(self.worker_runtime_env) - {"env_vars"})
        if unknown:
            raise ValueError(f"RunConfig(worker_runtime_env): only 'env_vars' is supported for a run's workers, got "
                             f"{unknown} (a run's code reaches its workers with the trainer's function)")
        env_vars = self.worker_runtime_env.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in env_vars.items()):
            raise ValueError("RunConfig(worker_runtime_env): env_vars must be a dict of str to str")
        if self.checkpoint_config.checkpoint_score_attribute is not None:
            raise ValueError("CheckpointConfig(checkpoint_score_attribute): not supported; a torus run keeps the "
                             "newest num_to_keep checkpoints")

    def _env_vars(self):
        return dict(self.worker_runtime_env.get("env_vars") or {})

    def _spec(self, default_name=None):
        spec = {"name": self.name or default_name, "max_failures": self.failure_config.max_failures,
                "storage_path": os.path.abspath(self.storage_path)}
        keep = self.checkpoint_config.num_to_keep
        if keep is not None:
            spec["checkpoints_to_keep"] = keep
        return spec

