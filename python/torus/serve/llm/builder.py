"""build_llm_deployment and build_openai_app: LLMConfigs as Serve applications, with the public torus.serve API.

build_llm_deployment(llm_config) is LLMServer (deployment.py) made an ingress (serve.ingress(): each replica builds
its FastAPI app) and a deployment named "LLMServer:<model id>" (Ray's name), bound to the config. Its options are
Ray's defaults (max_ongoing_requests 1e9, target_ongoing_requests 1e9 capped at torus's 1e6, health checks every
10 s) under the config's deployment_config; the replica asks for what the config's accelerator needs:
    CPU (no accelerator named)              ray_actor_options num_cpus (default 1)
    GPU (accelerator_type "L4", "A100", ...)  num_gpus 1 and accelerator_type
    TPU without a topology                  resources {"TPU": 1} and accelerator_type
    TPU with accelerator_config.topology    one whole slice per replica: Deployment._with_replica_gang(
                                            {"accelerator_type", "topology"}); rank 0 runs the server, the other
                                            hosts' ranks hold their chips
    placement_group_config                  placement_group_bundles and placement_group_strategy
build_openai_app(llm_serving_args) serves the OpenAI API of its models at the application's route prefix: with one
model the LLMServer deployment is the ingress itself (as Ray's direct-streaming mode); with several, an
OpenAiIngress deployment routes each request by its "model" to that model's LLMServer through a DeploymentHandle.

What torus cannot serve is refused here, naming the field: a model_source that can never be a local file (hub ids,
cloud mirrors, remote URIs), a lora_config, a callback class other than the default, a custom ingress class.
"""

import copy

from torus.serve.llm.configs import CallbackConfig, CPUConfig, GPUConfig, LLMConfig, LLMServingArgs, TPUConfig
from torus.serve.llm.engine import check_model_source_form

DEFAULT_MAX_ONGOING_REQUESTS = int(1e9)
# Ray's 1e9 (autoscale on nothing but min/max) is above what torus's autoscaler takes (1e6): the same in effect.
DEFAULT_MAX_TARGET_ONGOING_REQUESTS = int(1e6)
DEFAULT_HEALTH_CHECK_PERIOD_S = 10
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 10
DEFAULT_DEPLOYMENT_OPTIONS = {
    "max_ongoing_requests": DEFAULT_MAX_ONGOING_REQUESTS,
    "health_check_period_s": DEFAULT_HEALTH_CHECK_PERIOD_S,
    "health_check_timeout_s": DEFAULT_HEALTH_CHECK_TIMEOUT_S,
    "autoscaling_config": {"target_ongoing_requests": DEFAULT_MAX_TARGET_ONGOING_REQUESTS},
}


def deep_merge_dicts(base, override):
    result = dict(base)
    for key, value in override.items():
        if isinstance(result.get(key), dict) and isinstance(value, dict):
            result[key] = deep_merge_dicts(result[key], value)
        else:
            result[key] = value
    return result


def apply_deployment_defaults(defaults, user_options):
    """Ray's maybe_apply_llm_deployment_config_defaults: num_replicas given drops the default autoscaling."""
    if user_options and "num_replicas" in user_options:
        defaults = {k: v for k, v in defaults.items() if k != "autoscaling_config"}
    return deep_merge_dicts(defaults, user_options or {})


def deployment_name(llm_config):
    return llm_config.model_id.replace("/", "--").replace(".", "_")


def check_servable(llm_config):
    """ValueError naming what torus cannot serve of `llm_config`."""
    check_model_source_form(llm_config.model_loading_config)
    if llm_config.lora_config is not None:
        raise ValueError("lora_config: torus does not load LoRA adapters (they are downloaded from cloud storage "
                         "into vLLM); serve a GGUF file with the adapter merged instead")
    if llm_config.callback_config != CallbackConfig():
        raise ValueError("callback_config: torus runs no model-initialisation callbacks; leave it at its default")


def replica_options(llm_config):
    """The deployment options of a replica of `llm_config` (before Ray's defaults), and the replica gang spec of
    a TPU slice replica (None otherwise)."""
    options = copy.deepcopy(llm_config.deployment_config)
    actor = dict(options.get("ray_actor_options") or {})
    accelerator = llm_config.accelerator_config
    gang = None
    if llm_config.placement_group_config:
        pg = llm_config.placement_group_config
        bundles = pg.get("bundles") or [pg["bundle_per_worker"]]
        options["placement_group_bundles"] = copy.deepcopy(bundles)
        options["placement_group_strategy"] = pg.get("strategy", "PACK")
    elif isinstance(accelerator, TPUConfig) and accelerator.topology:
        gang = {"accelerator_type": llm_config.accelerator_type, "topology": accelerator.topology}
    elif isinstance(accelerator, TPUConfig):
        actor.setdefault("resources", {"TPU": 1})
        if llm_config.accelerator_type:
            actor.setdefault("accelerator_type", llm_config.accelerator_type)
    elif isinstance(accelerator, GPUConfig):
        actor.setdefault("num_gpus", 1)
        if llm_config.accelerator_type:
            actor.setdefault("accelerator_type", llm_config.accelerator_type)
    elif isinstance(accelerator, CPUConfig):
        actor.setdefault("num_cpus", 1)
    if llm_config.runtime_env:
        actor["runtime_env"] = {**(actor.get("runtime_env") or {}), **llm_config.runtime_env}
    if actor:
        options["ray_actor_options"] = actor
    return options, gang


def build_llm_deployment(llm_config, *, name_prefix=None, bind_kwargs=None, override_serve_options=None,
                         deployment_cls=None):
    """The Serve Application of one model's LLMServer (an OpenAI-compatible FastAPI ingress)."""
    from torus import serve
    from torus.serve.llm.deployment import LLMServer
    llm_config = LLMConfig.model_validate(llm_config)
    check_servable(llm_config)
    deployment_cls = deployment_cls or llm_config.server_cls or LLMServer
    name_prefix = name_prefix or f"{deployment_cls.__name__}:"
    options, gang = replica_options(llm_config)
    options["name"] = name_prefix + options.get("name", deployment_name(llm_config))
    options.update(override_serve_options or {})
    options = apply_deployment_defaults(DEFAULT_DEPLOYMENT_OPTIONS, options)
    deployment = serve.deployment(serve.ingress()(deployment_cls), **options)
    if gang is not None:
        deployment = deployment._with_replica_gang(gang)
    return deployment.bind(llm_config=llm_config, **(bind_kwargs or {}))


def build_openai_app(llm_serving_args):
    """The Serve Application answering the OpenAI API for every model of `llm_serving_args` (an LLMServingArgs
    or a dict of its fields)."""
    args = LLMServingArgs.model_validate(llm_serving_args)
    if len(args.llm_configs) == 1:
        if args.ingress_deployment_config:
            raise ValueError("ingress_deployment_config: with one model its LLMServer deployment is the ingress; "
                             "set its options in the LLMConfig's deployment_config")
        return build_llm_deployment(args.llm_configs[0])
    from torus.serve.llm.router import build_router_app
    return build_router_app(args, {c.model_id: build_llm_deployment(c) for c in args.llm_configs})
