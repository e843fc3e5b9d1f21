"""ray.serve.llm's layers that need no cluster and no model: the OpenAI request checks, text streaming with stop
strings, server-sent-event framing, engine_kwargs, LLMConfig's validation, the replica options the builder asks
for, and ModelServer's replies and streams over a scripted engine (the real model is in
tests/integration/test_serve_llm.py)."""

import asyncio
import json
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from torus.serve.llm import LLMConfig, LLMServingArgs, engine_options, protocol  # noqa: E402
from torus.serve.llm.builder import check_servable, replica_options  # noqa: E402
from torus.serve.llm.engine import Delta, resolve_model_file  # noqa: E402
from torus.serve.llm.text_stream import TextStream  # noqa: E402


def rejected(parse, body):
    with pytest.raises(protocol.OpenAIError) as info:
        parse(body)
    return info.value


# Requests.

def test_completion_defaults_follow_openai():
    request = protocol.parse_completion({"model": "m", "prompt": "Hi"})
    assert request.prompts == ("Hi",)
    assert request.sampling.max_tokens == 16 and request.sampling.temperature == 1.0
    assert request.sampling.top_p == 1.0 and request.sampling.seed is None and not request.stream


def test_completion_takes_every_prompt_form():
    assert protocol.parse_completion({"prompt": ["a", "b"]}).prompts == ("a", "b")
    assert protocol.parse_completion({"prompt": [1, 2, 3]}).prompts == ((1, 2, 3),)
    assert protocol.parse_completion({"prompt": [[1], [2, 3]]}).prompts == ((1,), (2, 3))


def test_chat_reads_messages_text_parts_and_sampling():
    request = protocol.parse_chat({
        "model": "m", "max_completion_tokens": 8, "temperature": 0, "seed": 7, "stop": "\n", "top_k": 5,
        "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "developer", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]})
    assert request.messages == (("system", "Be brief."), ("user", "Hello"))
    assert (request.sampling.max_tokens, request.sampling.temperature, request.sampling.seed) == (8, 0.0, 7)
    assert request.sampling.stop == ("\n",) and request.sampling.top_k == 5
    assert request.stream and request.include_usage
    assert protocol.parse_chat({"messages": [{"role": "user", "content": "x"}]}).sampling.max_tokens is None


@pytest.mark.parametrize("body, param, words", [
    ({"prompt": "x", "temperature": 5}, "temperature", "temperature: expected a number in [0.0, 2.0], got 5"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "max_tokens: expected an integer of at least 1"),
    ({"prompt": "x", "max_tokens": True}, "max_tokens", "max_tokens"),
    ({"prompt": "x", "top_p": 0}, "top_p", "top_p: expected a number in (0.0, 1.0]"),
    ({"prompt": "x", "seed": "1"}, "seed", "seed: expected an integer"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
    ({"prompt": "x", "stop": [""]}, "stop", "stop: expected a non-empty string"),
    ({"prompt": "x", "n": 2}, "n", "n: only 1 choice"),
    ({"prompt": "x", "logprobs": 3}, "logprobs", "logprobs"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream"),
    ({"prompt": "x", "logit_bias": {"a": 1}}, "logit_bias", "token ids"),
    ({"prompt": "x", "suffix": "y"}, "suffix", "suffix"),
    ({"prompt": "x", "frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
    ({"prompt": 3}, "prompt", "prompt: expected a string"),
    ({}, "prompt", "prompt: this field is required"),
    ({"prompt": "x", "model": 3}, "model", "model: expected a string"),
])
def test_bad_completion_fields_are_400_naming_the_field(body, param, words):
    error = rejected(protocol.parse_completion, body)
    assert error.status == 400 and error.param == param and words in error.message
    assert error.body() == {"error": {"message": error.message, "type": "BadRequestError", "param": param,
                                      "code": 400}}


@pytest.mark.parametrize("body, words", [
    ({}, "messages: this field is required"),
    ({"messages": []}, "messages: expected a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: expected one of"),
    ({"messages": [{"role": "user"}]}, "messages[0].content: this field is required"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
     "only text parts"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools: tool and function"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
     "response_format"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "max_completion_tokens": 2}, "give one"),
])
def test_bad_chat_requests_are_400(body, words):
    error = rejected(protocol.parse_chat, body)
    assert error.status == 400 and words in error.message


# Text as it streams.

def test_text_stream_waits_for_whole_utf8_characters():
    text = TextStream()
    euro = "€".encode()
    assert text.feed(b"a" + euro[:1]) == "a"
    assert text.feed(euro[1:2]) == ""
    assert text.feed(euro[2:]) == "€"
    assert text.feed(b"\xe2") == "" and text.finish() == "\ufffd"


def test_text_stream_holds_a_possible_stop_string_and_drops_it_when_it_comes():
    text = TextStream(["<end>"])
    assert text.feed(b"Hello <e") == "Hello "
    assert text.feed(b"n") == "" and not text.stopped
    assert text.feed(b"d> after") == "" and text.stopped
    assert text.feed(b"more") == "" and text.finish() == ""


def test_text_stream_releases_a_held_tail_that_is_not_a_stop_string():
    text = TextStream(["<end>"])
    assert text.feed(b"a <e") == "a "
    assert text.feed(b"x") == "<ex"
    assert text.feed(b" <en") == " " and text.finish() == "<en"


def test_text_stream_stops_at_the_earliest_stop_string():
    text = TextStream(["bb", "a"])
    assert text.feed(b"xxbbya") == "xx" and text.stopped


# Server-sent events.

def test_sse_framing_round_trips():
    stream = protocol.sse({"a": 1, "b": "é"}) + protocol.sse({"c": [1]}) + protocol.SSE_DONE
    assert stream.startswith('data: {"a":1,"b":"\\u00e9"}\n\n')
    assert protocol.parse_sse(stream) == [{"a": 1, "b": "é"}, {"c": [1]}, "[DONE]"]


# engine_kwargs.

def test_engine_kwargs_map_vllm_names_to_llama_cpp():
    options = engine_options.parse({"max_model_len": 512, "seed": 3, "tensor_parallel_size": 1,
                                    "enforce_eager": True, "n_threads": 2, "chat_format": "gemma"})
    assert options.llama == {"n_ctx": 512, "seed": 3, "n_threads": 2, "verbose": False}
    assert options.chat_format == "gemma" and options.chat_template is None
    assert engine_options.parse({}).llama == {"n_ctx": engine_options.DEFAULT_N_CTX, "verbose": False}


@pytest.mark.parametrize("kwargs, words", [
    ({"gpu_memory_utilization": 0.9}, "unsupported key 'gpu_memory_utilization'; accepted:"),
    ({"tensor_parallel_size": 8}, "only 1 is supported"),
    ({"max_model_len": 512, "n_ctx": 256}, "'max_model_len' and 'n_ctx' both set llama.cpp's n_ctx"),
    ({"max_model_len": 0}, "engine_kwargs['max_model_len']: expected a positive integer"),
    ({"use_mmap": "yes"}, "engine_kwargs['use_mmap']: expected bool"),
    ({"chat_format": "gemma", "chat_template": "{{x}}"}, "not both"),
])
def test_engine_kwargs_refused_by_name(kwargs, words):
    with pytest.raises(ValueError, match=None) as info:
        engine_options.parse(kwargs)
    assert words in str(info.value)


# LLMConfig.

def config(**fields):
    fields.setdefault("model_loading_config", {"model_id": "m", "model_source": "/models/m.gguf"})
    return LLMConfig(**fields)


def test_llm_config_round_trips_through_its_dict():
    c = config(accelerator_type="TPU-V6E", accelerator_config={"kind": "tpu", "topology": "4x4"},
               deployment_config={"num_replicas": 2})
    again = LLMConfig.model_validate(c.model_dump())
    assert again == c and again.model_id == "m" and again.tpu_slice == ("TPU-V6E", "4x4")


@pytest.mark.parametrize("fields, words", [
    ({"model_loading_config": {"model_idx": "m"}}, "Invalid model_loading_config"),
    ({"frobnicate": 1}, "LLMConfig: unknown field 'frobnicate'"),
    ({"llm_engine": "vLLM"}, "Unsupported engine: vLLM"),
    ({"accelerator_type": "Z80"}, "Unsupported accelerator type: Z80"),
    ({"accelerator_config": {"kind": "tpu", "topology": "4x4"}}, "accelerator_type must be provided"),
    ({"accelerator_type": "TPU-V6E", "accelerator_config": {"kind": "tpu", "topology": "3x3"}},
     "'3x3' is not a topology of TPU-V6E"),
    ({"accelerator_type": "L4", "accelerator_config": {"kind": "cpu"}}, "cannot be used with CPU-only"),
    ({"accelerator_type": "L4", "accelerator_config": {"kind": "tpu"}}, "Hardware mismatch"),
    ({"accelerator_config": {"kind": "fpga"}}, "accelerator_config.kind: expected 'cpu', 'gpu' or 'tpu'"),
    ({"deployment_config": {"placement_group_bundles": []}}, "must not be specified in deployment_config"),
    ({"deployment_config": {"replicas": 2}}, "unknown option replicas"),
    ({"experimental_configs": {"num_router_replicas": 2}}, "renamed to 'num_ingress_replicas'"),
    ({"lora_config": {"dynamic_lora_loading_path": "/local"}}, "Invalid lora_config"),
    ({"engine_kwargs": {"disable_log_stats": True}}, "disable_log_stats cannot be set to True"),
])
def test_llm_config_refusals_name_the_field(fields, words):
    with pytest.raises(ValueError) as info:
        config(**fields)
    assert words in str(info.value)


def test_accelerator_resolution():
    assert config().accelerator_config.kind == "cpu", "llama.cpp runs on CPUs when nothing names an accelerator"
    assert config(accelerator_type="A10").accelerator_type == "A10G"
    assert config(accelerator_type="L4").accelerator_config.kind == "gpu"
    assert config(accelerator_type="TPU-V6E").accelerator_config.kind == "tpu"
    assert config(placement_group_config={"bundles": [{"CPU": 2}]}).accelerator_config.kind == "cpu"


def test_serving_args_refuse_duplicates_and_nothing():
    with pytest.raises(ValueError, match="Duplicate models found"):
        LLMServingArgs(llm_configs=[config(), config()])
    with pytest.raises(ValueError, match="List of models is empty"):
        LLMServingArgs(llm_configs=[])
    assert LLMServingArgs.model_validate({"llm_configs": [config().model_dump()]}).llm_configs == [config()]


@pytest.mark.parametrize("source, words", [
    ("google/gemma-3-270m", "is not a local file; torus serves GGUF files with llama.cpp and cannot download"),
    ("gs://bucket/model.gguf", "is a remote URI"),
    ({"bucket_uri": "s3://bucket/model"}, "a CloudMirrorConfig (s3://bucket/model) is not supported"),
])
def test_sources_that_cannot_be_local_files_are_refused_when_building(source, words):
    with pytest.raises(ValueError) as info:
        check_servable(config(model_loading_config={"model_id": "m", "model_source": source}))
    assert "model_loading_config.model_source" in str(info.value) and words in str(info.value)


def test_model_file_must_be_gguf(tmp_path):
    loading = lambda path: config(model_loading_config={"model_id": "m", "model_source": str(path)})
    with pytest.raises(ValueError, match="is not a file on this host"):
        resolve_model_file(loading(tmp_path / "absent.gguf").model_loading_config)
    (tmp_path / "text.gguf").write_text("hello")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        resolve_model_file(loading(tmp_path / "text.gguf").model_loading_config)
    with pytest.raises(ValueError, match="is a directory"):
        resolve_model_file(loading(tmp_path).model_loading_config)


def test_replica_options_per_accelerator():
    options, gang = replica_options(config(accelerator_type="TPU-V6E",
                                           accelerator_config={"kind": "tpu", "topology": "4x4"}))
    assert gang == {"accelerator_type": "TPU-V6E", "topology": "4x4"}
    options, gang = replica_options(config(accelerator_type="L4", runtime_env={"env_vars": {"A": "1"}}))
    assert gang is None and options["ray_actor_options"] == {
        "num_gpus": 1, "accelerator_type": "L4", "runtime_env": {"env_vars": {"A": "1"}}}
    options, _ = replica_options(config(deployment_config={"ray_actor_options": {"num_cpus": 2}}))
    assert options["ray_actor_options"] == {"num_cpus": 2}
    options, _ = replica_options(config(placement_group_config={"bundle_per_worker": {"CPU": 2},
                                                                "strategy": "SPREAD"}))
    assert options["placement_group_bundles"] == [{"CPU": 2}] and options["placement_group_strategy"] == "SPREAD"


# ModelServer over a scripted engine: the replies and the streams' framing.

class ScriptedEngine:
    """Answers every prompt with REPLY's words (one token each) unless a stop string comes first."""

    REPLY = ["Hello", " there", ",", " friend", "."]

    def __init__(self, path, engine_kwargs):
        self.model_path = path
        self.n_ctx = 64
        self.template = type("T", (), {"origin": "scripted"})()
        self.generating = threading.Event()
        self.cancelled_seen = threading.Event()

    def tokenize_prompt(self, prompt):
        return list(prompt) if not isinstance(prompt, str) else [ord(c) for c in prompt]

    def render_chat(self, messages):
        return [ord(c) for _, text in messages for c in text], ("<eot>",)

    def detokenize(self, tokens):
        return "".join(chr(t) for t in tokens)

    def completion_budget(self, n_prompt, max_tokens, field):
        if n_prompt + (max_tokens or 0) > self.n_ctx:
            raise protocol.bad_request(f"too long for the {field}", "max_tokens")
        return max_tokens or self.n_ctx - n_prompt

    def generate(self, tokens, sampling, budget, stops, cancelled):
        text = TextStream(stops)
        count = 0
        for word in self.REPLY[:budget]:
            self.generating.set()
            if cancelled.wait(0.01):
                self.cancelled_seen.set()
                yield Delta("", "abort", len(tokens), count)
                return
            count += 1
            piece = text.feed(word.encode())
            if piece:
                yield Delta(piece)
            if text.stopped:
                yield Delta("", "stop", len(tokens), count)
                return
        tail = text.finish()
        if tail:
            yield Delta(tail)
        yield Delta("", "length", len(tokens), count)


@pytest.fixture
def model_server(tmp_path):
    from torus.serve.llm.server import ModelServer
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(16))
    ids = iter(range(100))
    return ModelServer(config(model_loading_config={"model_id": "m", "model_source": str(path)}),
                       engine_factory=ScriptedEngine, clock=lambda: 1000.0, new_id=lambda p: f"{p}-{next(ids)}")


def run(coro):
    return asyncio.run(coro)


async def collect(events):
    return protocol.parse_sse("".join([e async for e in events]))


def test_chat_reply_and_usage(model_server):
    reply = run(model_server.chat(protocol.parse_chat({"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4})))
    assert reply.events is None
    assert reply.body == {"id": "chatcmpl-0", "object": "chat.completion", "created": 1000, "model": "m",
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there, friend"},
                                       "logprobs": None, "finish_reason": "length"}],
                          "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}}


def test_chat_stream_frames_role_content_finish_usage_done(model_server):
    request = protocol.parse_chat({"messages": [{"role": "user", "content": "Hi"}], "stop": ",", "stream": True,
                                   "stream_options": {"include_usage": True}})

    async def go():
        return await collect((await model_server.chat(request)).events)
    events = run(go())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-0" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]] == ["Hello", " there"]
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3,
                                                                    "total_tokens": 5}


def test_completion_stream_of_two_prompts_with_echo(model_server):
    request = protocol.parse_completion({"prompt": ["ab", "c"], "max_tokens": 1, "echo": True, "stream": True})

    async def go():
        return await collect((await model_server.completions(request)).events)
    events = run(go())
    texts = [(c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"])
             for c in events[:-1]]
    assert texts == [(0, "ab", None), (0, "Hello", None), (0, "", "length"),
                     (1, "c", None), (1, "Hello", None), (1, "", "length")]
    assert events[-1] == "[DONE]"


def test_a_prompt_too_long_fails_before_any_stream(model_server):
    request = protocol.parse_completion({"prompt": "x" * 60, "max_tokens": 10, "stream": True})
    with pytest.raises(protocol.OpenAIError, match="too long for the prompt"):
        run(model_server.completions(request))


def test_leaving_a_stream_early_cancels_the_generation(model_server):
    request = protocol.parse_chat({"messages": [{"role": "user", "content": "Hi"}], "stream": True})
    engine = model_server._engine

    async def go():
        events = (await model_server.chat(request)).events
        first = [await events.__anext__(), await events.__anext__()]
        await events.aclose()
        return protocol.parse_sse("".join(first))
    role, hello = run(go())
    assert role["choices"][0]["delta"]["role"] == "assistant" and hello["choices"][0]["delta"]["content"] == "Hello"
    assert engine.cancelled_seen.wait(5), "the model thread stops generating for a client that left"


# The HTTP layer: LLMServer's routes, and OpenAiIngress routing by model over (fake, in-process) handles.

def http_request(body):
    from starlette.requests import Request
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}
    return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)


async def response_json(response):
    if hasattr(response, "body_iterator"):
        return response.status_code, protocol.parse_sse("".join([c async for c in response.body_iterator]))
    return response.status_code, json.loads(response.body)


def llm_server(tmp_path, model_id="m"):
    pytest.importorskip("starlette")
    from torus.serve.llm.deployment import LLMServer
    path = tmp_path / f"{model_id}.gguf"
    path.write_bytes(b"GGUF" + bytes(16))
    return LLMServer(config(model_loading_config={"model_id": model_id, "model_source": str(path)}),
                     engine_factory=ScriptedEngine)


def test_llm_server_routes_answer_json_streams_and_errors(tmp_path):
    server = llm_server(tmp_path)

    async def go():
        return [await response_json(await server.chat(http_request(
                    {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))),
                await response_json(await server.completions(http_request(
                    {"prompt": "Hi", "max_tokens": 2, "stream": True}))),
                await response_json(await server.chat(http_request(
                    {"model": "other", "messages": [{"role": "user", "content": "Hi"}]}))),
                await response_json(await server.completions(http_request(b"{not json"))),
                await response_json(await server.models()),
                await response_json(await server.model_data("nope"))]
    chat, stream, unknown, broken, models, missing = run(go())
    assert chat[0] == 200 and chat[1]["choices"][0]["message"]["content"] == "Hello there"
    assert stream[0] == 200 and stream[1][-1] == "[DONE]" and stream[1][0]["choices"][0]["text"] == "Hello"
    assert unknown[0] == 404 and 'Could not find base model with ID "other"' in unknown[1]["error"]["message"]
    assert broken[0] == 400 and "not valid JSON" in broken[1]["error"]["message"]
    assert models[0] == 200 and [m["id"] for m in models[1]["data"]] == ["m"]
    assert missing[0] == 404 and missing[1]["error"]["code"] == 404


class FakeHandle:
    """A DeploymentHandle's shape over an in-process LLMServer: method.remote(...) and options(stream=True)."""

    def __init__(self, server, stream=False):
        self._server, self._stream = server, stream

    def options(self, stream=False):
        return FakeHandle(self._server, stream)

    def __getattr__(self, name):
        method = getattr(self._server, name)
        if self._stream:
            return type("M", (), {"remote": staticmethod(lambda *a: method(*a))})()

        async def call(*a):
            return await method(*a)
        return type("M", (), {"remote": staticmethod(call)})()


def test_openai_ingress_routes_by_model_and_names_unknown_ones(tmp_path):
    pytest.importorskip("starlette")
    from torus.serve.llm.router import OpenAiIngress
    ingress = OpenAiIngress({m: FakeHandle(llm_server(tmp_path, m)) for m in ("a", "b")})
    ask = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}

    async def go():
        return [await response_json(await ingress.chat(http_request(dict(ask, model="b")))),
                await response_json(await ingress.chat(http_request(dict(ask, model="b", stream=True)))),
                await response_json(await ingress.chat(http_request(dict(ask, model="b", temperature=9)))),
                await response_json(await ingress.chat(http_request(dict(ask, model="c")))),
                await response_json(await ingress.chat(http_request(ask))),
                await response_json(await ingress.models())]
    reply, stream, bad, unknown, missing, models = run(go())
    assert reply[0] == 200 and reply[1]["model"] == "b" and reply[1]["choices"][0]["message"]["content"] == "Hello"
    assert stream[0] == 200 and stream[1][-1] == "[DONE]" and stream[1][1]["choices"][0]["delta"]["content"] == "Hello"
    assert bad[0] == 400 and "temperature" in bad[1]["error"]["message"]
    assert unknown[0] == 404 and 'ID "c"' in unknown[1]["error"]["message"]
    assert missing[0] == 400 and "Model parameter is required" in missing[1]["error"]["message"]
    assert [m["id"] for m in models[1]["data"]] == ["a", "b"]
