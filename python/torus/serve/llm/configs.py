"""The configs of ray.serve.llm (Ray 2.60's field names, defaults and messages) as torus validates them.

ModelLoadingConfig, CloudMirrorConfig, LoraConfig, CPUConfig/GPUConfig/TPUConfig and LLMConfig are @record
dataclasses (see _records.py): built from keyword arguments, validated at construction, ValueError naming the
field otherwise. Where torus differs from Ray it says so in the field's check:

* llm_engine is "llama.cpp" (the only engine; Ray's only value is "vLLM"): torus serves GGUF files.
* model_source must be a local .gguf file (validated when the replica loads it, where the file has to be, see
  engine.resolve_model_file); a hub id or a cloud mirror is refused there, naming the field.
* engine_kwargs are checked against engine_options.ACCEPTED at construction.
* With no accelerator_type and no placement_group_config, the accelerator resolves to CPU (Ray: GPU), because
  llama.cpp runs on CPUs; accelerator_type alone resolves to GPU or TPU as in Ray.
* lora_config and callback_config are validated as in Ray; the builders refuse a LoRA config and a callback
  class other than the default, since torus loads neither.

Plain values: thread-safe to read.
"""

import dataclasses
import enum
import importlib
from typing import Any, Dict, List, Optional, Union

from torus._private.accelerators import tpu as _tpu
from torus.serve.llm import engine_options
from torus.serve.llm._records import Record, check_positive_int, check_type, record
from torus.util.accelerators import accelerators as _accelerators

DEFAULT_MULTIPLEX_DOWNLOAD_TIMEOUT_S = 30.0
DEFAULT_MULTIPLEX_DOWNLOAD_TRIES = 3
MODEL_RESPONSE_BATCH_TIMEOUT_MS = 50.0

ACCELERATOR_TYPES = [v for k, v in vars(_accelerators).items() if k.isupper() and isinstance(v, str)]
TPU_ACCELERATOR_VALUES = {v for k, v in vars(_accelerators).items() if k.startswith("GOOGLE_TPU")}
_REMOTE_PREFIXES = ("s3://", "gs://", "abfss://", "azure://", "pyarrow-")

# The options serve.deployment takes that LLMConfig.deployment_config may set (Ray's DeploymentConfig fields plus
# name and ray_actor_options).
DEPLOYMENT_OPTIONS = (
    "name", "num_replicas", "ray_actor_options", "max_ongoing_requests", "max_queued_requests",
    "autoscaling_config", "user_config", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "logging_config", "request_router_config",
    "version", "max_constructor_retry_count",
)


class LLMEngine(str, enum.Enum):
    """The engines torus runs a model with."""

    LLAMA_CPP = "llama.cpp"


class InputModality(str, enum.Enum):
    text = "text"
    image = "image"


def is_remote_path(path):
    return path.startswith(_REMOTE_PREFIXES)


def load_class(path):
    """The class named by "module.Class" or "module:Class"; ValueError naming it otherwise."""
    module_name, sep, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not name:
        raise ValueError(f"server_cls: {path!r} is not \"module.Class\" or \"module:Class\"")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"server_cls: cannot load {path!r}: {e}") from e


@record
class ExtraFiles(Record):
    bucket_uri: str
    destination_path: str


@record
class CloudMirrorConfig(Record):
    """Unified mirror config for cloud storage (S3, GCS, or Azure)."""

    bucket_uri: Optional[str] = None
    extra_files: List[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if self.bucket_uri is not None:
            check_type("CloudMirrorConfig", "bucket_uri", self.bucket_uri, (str,), "a string")
            if not is_remote_path(self.bucket_uri):
                raise ValueError(f'Got invalid value "{self.bucket_uri}" for bucket_uri. '
                                 'Expected a URI that starts with "s3://", "gs://", "abfss://", or "azure://".')
        check_type("CloudMirrorConfig", "extra_files", self.extra_files, (list,), "a list")
        self.extra_files = [ExtraFiles.model_validate(f) for f in self.extra_files]

    @property
    def storage_type(self):
        for prefix, kind in (("s3://", "s3"), ("gs://", "gcs"), ("abfss://", "abfss"), ("azure://", "azure")):
            if self.bucket_uri and self.bucket_uri.startswith(prefix):
                return kind
        return None


@record
class LoraConfig(Record):
    dynamic_lora_loading_path: Optional[str] = None
    max_num_adapters_per_replica: int = 16
    download_timeout_s: Optional[float] = DEFAULT_MULTIPLEX_DOWNLOAD_TIMEOUT_S
    max_download_tries: int = DEFAULT_MULTIPLEX_DOWNLOAD_TRIES

    def __post_init__(self):
        value = self.dynamic_lora_loading_path
        if value is not None:
            check_type("LoraConfig", "dynamic_lora_loading_path", value, (str,), "a string")
            if not is_remote_path(value):
                raise ValueError('Only AWS S3, Google Cloud Storage, and Azure Storage are supported. The '
                                 'dynamic_lora_loading_path must start with "s3://", "gs://", "abfss://", or '
                                 f'"azure://". Got "{value}" instead.')
            self.dynamic_lora_loading_path = value.rstrip("/")
        check_positive_int("LoraConfig", "max_num_adapters_per_replica", self.max_num_adapters_per_replica)
        if self.download_timeout_s is not None:
            check_type("LoraConfig", "download_timeout_s", self.download_timeout_s, (int, float), "a number")
        check_type("LoraConfig", "max_download_tries", self.max_download_tries, (int,), "an integer")


@record
class ModelLoadingConfig(Record):
    model_id: str
    model_source: Optional[Union[str, CloudMirrorConfig]] = None
    tokenizer_source: Optional[str] = None

    def __post_init__(self):
        check_type("ModelLoadingConfig", "model_id", self.model_id, (str,), "a string")
        if not self.model_id:
            raise ValueError("ModelLoadingConfig.model_id: expected a non-empty string")
        if isinstance(self.model_source, dict):
            self.model_source = CloudMirrorConfig.model_validate(self.model_source)
        elif self.model_source is not None:
            check_type("ModelLoadingConfig", "model_source", self.model_source, (str, CloudMirrorConfig),
                       "a path to a .gguf file")
        if self.tokenizer_source is not None:
            check_type("ModelLoadingConfig", "tokenizer_source", self.tokenizer_source, (str,), "a string")


@record
class CPUConfig(Record):
    kind: str = "cpu"


@record
class GPUConfig(Record):
    kind: str = "gpu"


@record
class TPUConfig(Record):
    kind: str = "tpu"
    topology: Optional[str] = None


_ACCELERATOR_CONFIGS = {"cpu": CPUConfig, "gpu": GPUConfig, "tpu": TPUConfig}


def _accelerator_config(value):
    if value is None or isinstance(value, tuple(_ACCELERATOR_CONFIGS.values())):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"accelerator_config: expected a dict with 'kind' (cpu, gpu or tpu), got {value!r}")
    kind = value.get("kind")
    if kind not in _ACCELERATOR_CONFIGS:
        raise ValueError(f"accelerator_config.kind: expected 'cpu', 'gpu' or 'tpu', got {kind!r}")
    return _ACCELERATOR_CONFIGS[kind](**value)


def infer_hardware_kind_from_bundles(placement_group_config):
    """"tpu", "gpu" or "cpu" from a placement_group_config's bundles; None without one."""
    if not placement_group_config:
        return None
    bundles = [placement_group_config.get("bundle_per_worker") or {}] + list(placement_group_config.get("bundles")
                                                                              or [])
    if any(b.get("TPU", 0) > 0 for b in bundles):
        return "tpu"
    if any(b.get("GPU", 0) > 0 for b in bundles):
        return "gpu"
    return "cpu"


def _check_placement_group_config(value):
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"placement_group_config: expected a dict, got {value!r}")
    unknown = set(value) - {"bundles", "bundle_per_worker", "strategy"}
    if unknown:
        raise ValueError(f"placement_group_config: unknown keys {sorted(unknown)}; accepted: bundles, "
                         "bundle_per_worker, strategy")
    if "bundles" in value and "bundle_per_worker" in value:
        raise ValueError("placement_group_config: give either 'bundles' or 'bundle_per_worker', not both")
    bundles = value.get("bundles")
    if bundles is not None and (not isinstance(bundles, list) or not bundles
                                or not all(isinstance(b, dict) for b in bundles)):
        raise ValueError(f"placement_group_config.bundles: expected a non-empty list of resource dicts, got "
                         f"{bundles!r}")
    per_worker = value.get("bundle_per_worker")
    if per_worker is not None and not isinstance(per_worker, dict):
        raise ValueError(f"placement_group_config.bundle_per_worker: expected a resource dict, got {per_worker!r}")
    strategy = value.get("strategy", "PACK")
    if strategy not in ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"):
        raise ValueError(f"placement_group_config.strategy: expected PACK, STRICT_PACK, SPREAD or STRICT_SPREAD, "
                         f"got {strategy!r}")


@record
class CallbackConfig(Record):
    """Configuration for the callback to be used in LLMConfig (torus accepts only the default)."""

    callback_class: Any = "ray.llm._internal.common.callbacks.base.CallbackBase"
    callback_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    raise_error_on_callback: bool = True


@record
class LLMConfig(Record):
    """The configuration for starting an LLM deployment."""

    model_loading_config: Union[Dict[str, Any], ModelLoadingConfig]
    runtime_env: Optional[Dict[str, Any]] = None
    llm_engine: str = LLMEngine.LLAMA_CPP.value
    engine_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    accelerator_type: Optional[str] = None
    accelerator_config: Optional[Any] = None
    placement_group_config: Optional[Dict[str, Any]] = None
    lora_config: Optional[Union[Dict[str, Any], LoraConfig]] = None
    deployment_config: Dict[str, Any] = dataclasses.field(default_factory=dict)
    server_cls: Optional[Any] = None
    experimental_configs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    log_engine_metrics: Optional[bool] = True
    callback_config: Any = dataclasses.field(default_factory=CallbackConfig)

    def __post_init__(self):
        self._validate_fields()
        self._resolve_accelerator_config()
        self._check_accelerator_type_matches_hardware()

    # Field by field, in Ray's order and words.

    def _validate_fields(self):
        if self.runtime_env is not None:
            check_type("LLMConfig", "runtime_env", self.runtime_env, (dict,), "a dict")
        if not isinstance(self.model_loading_config, ModelLoadingConfig):
            try:
                self.model_loading_config = ModelLoadingConfig.model_validate(self.model_loading_config)
            except ValueError as e:
                raise ValueError(f"Invalid model_loading_config: {self.model_loading_config}: {e}") from e
        if self.llm_engine not in [e.value for e in LLMEngine]:
            raise ValueError(f"Unsupported engine: {self.llm_engine} (torus runs GGUF models with llama.cpp; "
                             f"llm_engine accepts {[e.value for e in LLMEngine]})")
        check_type("LLMConfig", "engine_kwargs", self.engine_kwargs, (dict,), "a dict")
        engine_options.parse(self.engine_kwargs)
        if self.accelerator_type is not None:
            if self.accelerator_type == "A10":
                self.accelerator_type = "A10G"
            if self.accelerator_type not in ACCELERATOR_TYPES:
                raise ValueError(f"Unsupported accelerator type: {self.accelerator_type}")
        self.accelerator_config = _accelerator_config(self.accelerator_config)
        _check_placement_group_config(self.placement_group_config)
        if self.lora_config is not None and not isinstance(self.lora_config, LoraConfig):
            try:
                self.lora_config = LoraConfig.model_validate(self.lora_config)
            except ValueError as e:
                raise ValueError(f"Invalid lora_config: {self.lora_config}: {e}") from e
        self._validate_deployment_config()
        if isinstance(self.server_cls, str):
            self.server_cls = load_class(self.server_cls)
        check_type("LLMConfig", "experimental_configs", self.experimental_configs, (dict,), "a dict")
        if "num_router_replicas" in self.experimental_configs:
            raise ValueError("The 'num_router_replicas' key in experimental_configs has been renamed to "
                             "'num_ingress_replicas'. Please update your configuration to use "
                             "'num_ingress_replicas' instead.")
        if self.log_engine_metrics and self.engine_kwargs.get("disable_log_stats"):
            raise ValueError("disable_log_stats cannot be set to True when log_engine_metrics is enabled. "
                             "Engine metrics require log stats to be enabled.")
        if isinstance(self.callback_config, dict):
            self.callback_config = CallbackConfig(**self.callback_config)
        check_type("LLMConfig", "callback_config", self.callback_config, (CallbackConfig,),
                   "a CallbackConfig or a dict of its fields")

    def _validate_deployment_config(self):
        value = self.deployment_config
        check_type("LLMConfig", "deployment_config", value, (dict,), "a dict")
        unknown = sorted(set(value) - set(DEPLOYMENT_OPTIONS))
        if "placement_group_bundles" in value or "placement_group_strategy" in value:
            raise ValueError("placement_group_bundles and placement_group_strategy must not be specified in "
                             "deployment_config. You can override the default values by setting the "
                             "`placement_group_config` in the LLMConfig.")
        if unknown:
            raise ValueError(f"Invalid deployment config: {value}: unknown option{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(unknown)}; accepted: {', '.join(DEPLOYMENT_OPTIONS)}")
        replicas = value.get("num_replicas")
        if replicas is not None and replicas != "auto" and (not isinstance(replicas, int) or replicas < 0
                                                            or isinstance(replicas, bool)):
            raise ValueError(f"Invalid deployment config: {value}: num_replicas must be a non-negative integer "
                             f"or \"auto\"")
        if "ray_actor_options" in value and not isinstance(value["ray_actor_options"], dict):
            raise ValueError(f"Invalid deployment config: {value}: ray_actor_options must be a dict")
        if "autoscaling_config" in value and not isinstance(value["autoscaling_config"], (dict, type(None))):
            raise ValueError(f"Invalid deployment config: {value}: autoscaling_config must be a dict")

    # The accelerator, resolved as Ray does (but CPU when nothing names one).

    def _resolve_accelerator_config(self):
        if self.accelerator_config is not None:
            return
        inferred = infer_hardware_kind_from_bundles(self.placement_group_config)
        if inferred is not None:
            self.accelerator_config = _ACCELERATOR_CONFIGS[inferred]()
        elif self.accelerator_type:
            tpu = self.accelerator_type in TPU_ACCELERATOR_VALUES
            self.accelerator_config = TPUConfig() if tpu else GPUConfig()
        else:
            self.accelerator_config = CPUConfig()

    def _check_accelerator_type_matches_hardware(self):
        config = self.accelerator_config
        if isinstance(config, TPUConfig) and config.topology is not None:
            check_type("TPUConfig", "topology", config.topology, (str,), 'a TPU topology such as "4x4"')
            if not self.accelerator_type:
                raise ValueError("accelerator_type must be provided when specifying a TPU topology for TPU slice "
                                 "provisioning.")
            if (self.accelerator_type in TPU_ACCELERATOR_VALUES
                    and not _tpu.is_valid_tpu_accelerator_topology(self.accelerator_type, config.topology)):
                raise ValueError(f"accelerator_config.topology: {config.topology!r} is not a topology of "
                                 f"{self.accelerator_type}")
        if not self.accelerator_type:
            return
        if isinstance(config, CPUConfig):
            raise ValueError(f"accelerator_type='{self.accelerator_type}' cannot be used with CPU-only "
                             "configurations. Either remove accelerator_type, or provide an accelerator_config.")
        expected = "tpu" if self.accelerator_type in TPU_ACCELERATOR_VALUES else "gpu"
        if config.kind != expected:
            raise ValueError(f"Hardware mismatch: accelerator_type='{self.accelerator_type}' requires a "
                             f"{expected.upper()} backend, but the configuration resolved to a "
                             f"{config.kind.upper()} backend. Please ensure your bundles and accelerator_type "
                             "align.")

    # Read-only views, as Ray's LLMConfig has them.

    @property
    def model_id(self):
        return self.model_loading_config.model_id

    @property
    def max_request_context_length(self):
        return self.engine_kwargs.get("max_model_len", self.engine_kwargs.get("n_ctx"))

    @property
    def supports_vision(self):
        return False

    @property
    def input_modality(self):
        return InputModality.text.value

    @property
    def model_architecture(self):
        return "UNSPECIFIED"

    @property
    def tpu_slice(self):
        """(accelerator_type, topology) when a replica is a whole TPU slice, else None."""
        config = self.accelerator_config
        if isinstance(config, TPUConfig) and config.topology:
            return self.accelerator_type, config.topology
        return None


def _llm_configs(value):
    if not isinstance(value, list):
        raise ValueError(f"LLMServingArgs.llm_configs: expected a list of LLMConfigs, dicts or YAML paths, got "
                         f"{value!r}")
    configs = []
    for config in value:
        if isinstance(config, str):
            import os
            if not os.path.exists(config):
                raise ValueError(f"Could not load model config from {config}, as the file does not exist.")
            configs.append(LLMConfig.from_file(config))
        elif isinstance(config, dict):
            configs.append(LLMConfig.model_validate(config))
        elif isinstance(config, LLMConfig):
            configs.append(config)
        else:
            raise TypeError(f"Invalid LLMConfig type: {type(config)}")
    return configs


@record
class LLMServingArgs(Record):
    """The configuration for starting an LLM deployment application."""

    llm_configs: List[Any]
    ingress_cls_config: Any = None
    ingress_deployment_config: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.llm_configs = _llm_configs(self.llm_configs)
        if self.ingress_cls_config not in (None, {}):
            raise ValueError("LLMServingArgs.ingress_cls_config: torus serves its own OpenAI-compatible routes in "
                             "each model's replica; a custom ingress class is not supported")
        check_type("LLMServingArgs", "ingress_deployment_config", self.ingress_deployment_config, (dict,),
                   "a dict")
        if len({m.model_id for m in self.llm_configs}) != len(self.llm_configs):
            raise ValueError("Duplicate models found. Make sure model ids are unique.")
        if len(self.llm_configs) == 0:
            raise ValueError("List of models is empty. Maybe some parameters cannot be parsed into the LLMConfig "
                             "config.")
