"""LLMConfig.engine_kwargs as llama.cpp's Llama(...) arguments: which keys torus honours and what each becomes.

Ray's engine_kwargs are vLLM's engine arguments. torus runs GGUF models with llama.cpp, so it honours the vLLM
names that have a llama.cpp meaning, and llama.cpp's own names; any other key is refused (naming it and the
accepted ones) instead of being ignored:

    vLLM name                 llama.cpp            note
    max_model_len             n_ctx                context window in tokens (default: 2048)
    seed                      seed                 default sampling seed of the replica
    max_num_batched_tokens    n_batch              prompt tokens evaluated per step
    tensor_parallel_size      -                    only 1: llama.cpp runs a model in one process
    pipeline_parallel_size    -                    only 1, for the same reason
    enforce_eager, trust_remote_code, disable_log_stats, enable_prefix_caching
                              -                    accepted, no effect on llama.cpp (no graphs, no remote code,
                                                   no stats, prompt prefixes are always reused)

    llama.cpp names passed as they are: n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, n_gpu_layers,
    seed, use_mmap, use_mlock, flash_attn, verbose (default False).

    How chat messages become a prompt (engine.ChatTemplate):
    chat_template             a Jinja chat template (vLLM's name), rendered as llama-cpp-python renders a GGUF's
    chat_format               the name of one of llama.cpp's built-in templates ("gemma", "chatml", "llama3", ...)

A vLLM name and its llama.cpp twin given together (max_model_len and n_ctx) is refused. Pure functions, no I/O.
"""

import dataclasses
from typing import Optional

DEFAULT_N_CTX = 2048

_VLLM_TO_LLAMA = {"max_model_len": "n_ctx", "seed": "seed", "max_num_batched_tokens": "n_batch"}
_ONLY_ONE = ("tensor_parallel_size", "pipeline_parallel_size")
_NO_EFFECT = ("enforce_eager", "trust_remote_code", "disable_log_stats", "enable_prefix_caching")

_POSITIVE_INT = ("n_ctx", "n_batch", "n_ubatch", "n_threads", "n_threads_batch")
_LLAMA_TYPES = {
    "n_ctx": int, "n_batch": int, "n_ubatch": int, "n_threads": int, "n_threads_batch": int,
    "n_gpu_layers": int, "seed": int, "use_mmap": bool, "use_mlock": bool, "flash_attn": bool, "verbose": bool,
    "chat_template": str, "chat_format": str,
}
_CHAT = ("chat_template", "chat_format")

ACCEPTED = sorted(set(_VLLM_TO_LLAMA) | set(_ONLY_ONE) | set(_NO_EFFECT) | set(_LLAMA_TYPES))


def _check_value(key, name, value):
    kind = _LLAMA_TYPES[name]
    wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    if wrong:
        raise ValueError(f"engine_kwargs[{key!r}]: expected {'an integer' if kind is int else kind.__name__}, "
                         f"got {value!r}")
    if name in _POSITIVE_INT and value <= 0:
        raise ValueError(f"engine_kwargs[{key!r}]: expected a positive integer, got {value!r}")


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    llama: dict                          # Llama(...)'s keyword arguments beyond model_path
    chat_template: Optional[str] = None  # Jinja text
    chat_format: Optional[str] = None    # a llama.cpp built-in template's name


def parse(engine_kwargs):
    """The EngineOptions of `engine_kwargs`; ValueError naming a bad key."""
    llama = llama_kwargs(engine_kwargs)
    chat = {k: llama.pop(k) for k in _CHAT if k in llama}
    if len(chat) > 1:
        raise ValueError("engine_kwargs: give either 'chat_template' (Jinja text) or 'chat_format' (a llama.cpp "
                         "template name), not both")
    return EngineOptions(llama=llama, **chat)


def llama_kwargs(engine_kwargs):
    """The honoured keys of `engine_kwargs` under llama.cpp's names; ValueError naming a bad key."""
    if not isinstance(engine_kwargs, dict):
        raise ValueError(f"engine_kwargs: expected a dict, got {engine_kwargs!r}")
    out = {"n_ctx": DEFAULT_N_CTX, "verbose": False}
    given = {}
    for key, value in engine_kwargs.items():
        if key in _ONLY_ONE:
            if value not in (None, 1) or isinstance(value, bool):
                raise ValueError(f"engine_kwargs[{key!r}]: only 1 is supported (llama.cpp runs a model in one "
                                 f"process), got {value!r}")
            continue
        if key in _NO_EFFECT:
            continue
        name = _VLLM_TO_LLAMA.get(key, key)
        if name not in _LLAMA_TYPES:
            raise ValueError(f"engine_kwargs: unsupported key {key!r}; accepted: {', '.join(ACCEPTED)}")
        if name in given:
            raise ValueError(f"engine_kwargs: {given[name]!r} and {key!r} both set llama.cpp's {name}; give one")
        _check_value(key, name, value)
        given[name] = key
        out[name] = value
    return out
