"""ModelServer: one LLMConfig's model answering OpenAI completion and chat requests (no HTTP here).

ModelServer(llm_config) finds the model file (engine.resolve_model_file), loads it (engine.LlamaCppEngine) and
runs it on a runner.ModelRunner. completions(request) and chat(request) take protocol.CompletionRequest /
ChatRequest and return a Reply: either `body` (the whole JSON response) or `events` (an async iterator of
server-sent events, ending with "data: [DONE]"). Everything that can make a request fail with 400 (prompt too
long, a template that refuses the messages, a token id out of the vocabulary) is checked before a Reply is
returned, so a stream never starts only to fail on its input. An engine failure in the middle of a stream ends the
stream with an error event, then [DONE].

Used on one event loop; the model itself runs on the runner's thread. Time (`clock`) and ids (`new_id`) are
injected for tests.
"""

import dataclasses
import time
import uuid
from typing import Any, AsyncIterator, Optional

from torus.serve.llm import protocol
from torus.serve.llm.configs import LLMConfig
from torus.serve.llm.engine import LlamaCppEngine, resolve_model_file
from torus.serve.llm.runner import ModelRunner


@dataclasses.dataclass
class Reply:
    body: Optional[dict] = None
    events: Optional[AsyncIterator[str]] = None


def _engine_method(name):
    """A function of (engine, *args) calling the engine's method `name` (for ModelRunner)."""
    return lambda engine, *args: getattr(engine, name)(*args)


def _new_id(prefix):
    return f"{prefix}-{uuid.uuid4().hex}"


class ModelServer:
    def __init__(self, llm_config, *, engine_factory=None, clock=time.time, new_id=_new_id):
        self.llm_config = LLMConfig.model_validate(llm_config)
        self._clock = clock
        self._new_id = new_id
        path = resolve_model_file(self.llm_config.model_loading_config)
        engine = (engine_factory or LlamaCppEngine)(path, self.llm_config.engine_kwargs)
        self._engine = engine
        self._runner = ModelRunner(engine)
        self._created = int(clock())

    @property
    def model_id(self):
        return self.llm_config.model_id

    def model_card(self):
        """The /v1/models entry: Ray's metadata plus what torus serves it with."""
        metadata = {
            "model_id": self.model_id,
            "input_modality": self.llm_config.input_modality,
            "max_request_context_length": self._engine.n_ctx,
            "engine": "llama.cpp",
            "model_file": self._engine.model_path,
            "chat_template": self._engine.template.origin,
        }
        return protocol.model_card(self.model_id, self._created, metadata)

    async def check_health(self):
        await self._runner.call(lambda engine: engine.n_ctx)

    # Completions.

    async def completions(self, request):
        prepared = []
        for prompt in request.prompts:
            tokens = await self._runner.call(_engine_method("tokenize_prompt"), prompt)
            budget = self._engine.completion_budget(len(tokens), request.sampling.max_tokens, "prompt")
            echo = ""
            if request.echo:
                echo = prompt if isinstance(prompt, str) else await self._runner.call(_engine_method("detokenize"),
                                                                                       prompt)
            prepared.append((tokens, budget, echo))
        request_id, created = self._new_id("cmpl"), int(self._clock())
        if request.stream:
            return Reply(events=self._completion_events(request, prepared, request_id, created))
        choices, n_prompt, n_completion = [], 0, 0
        for tokens, budget, echo in prepared:
            text, last = await self._collect(tokens, request.sampling, budget, request.sampling.stop)
            choices.append((echo + text, last.finish_reason))
            n_prompt += last.prompt_tokens
            n_completion += last.completion_tokens
        return Reply(body=protocol.completion_response(request_id, created, self.model_id, choices,
                                                        protocol.usage(n_prompt, n_completion)))

    async def _completion_events(self, request, prepared, request_id, created):
        n_prompt, n_completion = 0, 0
        try:
            for index, (tokens, budget, echo) in enumerate(prepared):
                if echo:
                    yield protocol.sse(protocol.completion_chunk(request_id, created, self.model_id, index, echo))
                async for delta in self._generate(tokens, request.sampling, budget, request.sampling.stop):
                    if delta.finish_reason is None:
                        yield protocol.sse(protocol.completion_chunk(request_id, created, self.model_id, index,
                                                                     delta.text))
                        continue
                    n_prompt += delta.prompt_tokens
                    n_completion += delta.completion_tokens
                    yield protocol.sse(protocol.completion_chunk(request_id, created, self.model_id, index, "",
                                                                 delta.finish_reason))
            if request.include_usage:
                yield protocol.sse(protocol.usage_chunk(request_id, created, self.model_id, "text_completion",
                                                        protocol.usage(n_prompt, n_completion)))
        except Exception as e:
            yield protocol.sse_error(_as_openai_error(e))
        yield protocol.SSE_DONE

    # Chat.

    async def chat(self, request):
        tokens, template_stops = await self._runner.call(_engine_method("render_chat"), request.messages)
        budget = self._engine.completion_budget(len(tokens), request.sampling.max_tokens, "messages")
        stops = tuple(request.sampling.stop) + tuple(template_stops)
        request_id, created = self._new_id("chatcmpl"), int(self._clock())
        if request.stream:
            return Reply(events=self._chat_events(request, tokens, budget, stops, request_id, created))
        text, last = await self._collect(tokens, request.sampling, budget, stops)
        return Reply(body=protocol.chat_response(request_id, created, self.model_id, text, last.finish_reason,
                                                  protocol.usage(last.prompt_tokens, last.completion_tokens)))

    async def _chat_events(self, request, tokens, budget, stops, request_id, created):
        try:
            yield protocol.sse(protocol.chat_chunk(request_id, created, self.model_id,
                                                   {"role": "assistant", "content": ""}))
            async for delta in self._generate(tokens, request.sampling, budget, stops):
                if delta.finish_reason is None:
                    yield protocol.sse(protocol.chat_chunk(request_id, created, self.model_id,
                                                           {"content": delta.text}))
                    continue
                yield protocol.sse(protocol.chat_chunk(request_id, created, self.model_id, {},
                                                       delta.finish_reason))
                if request.include_usage:
                    yield protocol.sse(protocol.usage_chunk(
                        request_id, created, self.model_id, "chat.completion.chunk",
                        protocol.usage(delta.prompt_tokens, delta.completion_tokens)))
        except Exception as e:
            yield protocol.sse_error(_as_openai_error(e))
        yield protocol.SSE_DONE

    # Generation on the model thread.

    def _generate(self, tokens, sampling, budget, stops):
        return self._runner.stream(_engine_method("generate"), tokens, sampling, budget, stops)

    async def _collect(self, tokens, sampling, budget, stops):
        pieces, last = [], None
        async for delta in self._generate(tokens, sampling, budget, stops):
            pieces.append(delta.text)
            last = delta
        return "".join(pieces), last


def _as_openai_error(error):
    if isinstance(error, protocol.OpenAIError):
        return error
    return protocol.OpenAIError(500, f"The model failed while generating: {type(error).__name__}: {error}")
