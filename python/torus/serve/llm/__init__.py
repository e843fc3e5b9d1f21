"""ray.serve.llm on torus: LLM deployments answering the OpenAI API, run by llama.cpp on GGUF model files.

    from ray.serve.llm import LLMConfig, build_openai_app
    config = LLMConfig(model_loading_config={"model_id": "gemma3-270m", "model_source": "/models/gemma.gguf"})
    serve.run(build_openai_app({"llm_configs": [config]}))
    # POST /v1/chat/completions, /v1/completions; GET /v1/models

Ray 2.60's names, fields, defaults and messages (configs.py), with the differences configs.py and builder.py state:
llama.cpp instead of vLLM, a local .gguf file instead of a hub download, one whole TPU slice per replica when
accelerator_config has a topology. The configs import without pydantic or FastAPI; the server and the builders
import FastAPI and llama-cpp-python when used.
"""

from torus.serve.llm.configs import CloudMirrorConfig, LLMConfig, LLMServingArgs, LoraConfig, ModelLoadingConfig


def build_llm_deployment(llm_config, *, name_prefix=None, bind_kwargs=None, override_serve_options=None,
                         deployment_cls=None):
    """The Serve Application of one model's LLMServer, an OpenAI-compatible ingress (see builder.py)."""
    from torus.serve.llm import builder
    return builder.build_llm_deployment(llm_config, name_prefix=name_prefix, bind_kwargs=bind_kwargs,
                                        override_serve_options=override_serve_options,
                                        deployment_cls=deployment_cls)


def build_openai_app(llm_serving_args):
    """The Serve Application answering the OpenAI API for the models of `llm_serving_args` (an LLMServingArgs or
    a dict with llm_configs), see builder.py."""
    from torus.serve.llm import builder
    return builder.build_openai_app(llm_serving_args)


def _refused(name, reason):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"ray.serve.llm.{name} is not available on torus: {reason}")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not available on torus: {reason}"
    return refuse


build_pd_openai_app = _refused(
    "build_pd_openai_app", "prefill/decode disaggregation moves vLLM's KV cache between deployments, and torus runs "
    "models with llama.cpp; use build_openai_app")
build_dp_deployment = _refused(
    "build_dp_deployment", "data-parallel attention is a vLLM engine mode, and torus runs models with llama.cpp; "
    "use build_llm_deployment with num_replicas")
build_dp_openai_app = _refused(
    "build_dp_openai_app", "data-parallel attention is a vLLM engine mode, and torus runs models with llama.cpp; "
    "use build_openai_app with num_replicas")


def __getattr__(name):
    if name == "LLMServer":
        from torus.serve.llm.deployment import LLMServer
        return LLMServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LLMConfig",
    "LLMServingArgs",
    "ModelLoadingConfig",
    "CloudMirrorConfig",
    "LoraConfig",
    "build_llm_deployment",
    "build_openai_app",
    "build_pd_openai_app",
    "build_dp_deployment",
    "build_dp_openai_app",
    "LLMServer",
]
