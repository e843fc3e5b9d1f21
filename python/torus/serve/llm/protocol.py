"""The OpenAI wire protocol of torus's LLM server: request bodies in, typed requests out; responses, stream chunks,
server-sent-event framing and error bodies.

parse_completion(body) and parse_chat(body) take the decoded JSON body of POST /v1/completions and
/v1/chat/completions and return a CompletionRequest / ChatRequest, or raise OpenAIError(400) naming the field and
what it accepts. Fields torus does not recognise are refused (as OpenAI does: "Unrecognized request argument
supplied: X"); fields it recognises but cannot honour (n > 1, logprobs, tools, images) are refused by name, never
ignored. Defaults follow OpenAI: temperature 1, top_p 1, max_tokens 16 for completions and "up to the context"
for chat. vLLM's sampling extensions top_k, min_p and repetition_penalty are accepted, as vLLM does.

Pure functions and frozen values: no I/O, no clock (callers pass `created`), thread-safe.
"""

import dataclasses
import json
from typing import Dict, List, Optional, Tuple, Union

MAX_STOP_SEQUENCES = 4
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
ROLES = ("system", "developer", "user", "assistant")

_COMMON = ("model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
           "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs", "top_k", "min_p",
           "repetition_penalty")
_COMPLETION_ONLY = ("prompt", "echo", "suffix", "best_of")
_CHAT_ONLY = ("messages", "max_completion_tokens", "top_logprobs", "response_format", "tools", "tool_choice",
              "functions", "function_call", "parallel_tool_calls")


class OpenAIError(Exception):
    """An error the server answers with OpenAI's error body and `status`."""

    TYPES = {400: "BadRequestError", 404: "NotFoundError", 408: "RequestTimeoutError", 500: "InternalServerError",
             503: "ServiceUnavailableError"}

    def __init__(self, status, message, param=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self):
        """{"error": {"message", "type", "param", "code"}} as Ray Serve LLM answers (code: the HTTP status)."""
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "APIError"),
                          "param": self.param, "code": self.status}}


def bad_request(message, param=None):
    return OpenAIError(400, message, param)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How to pick tokens and when to stop. max_tokens None: up to the context window."""

    max_tokens: Optional[int] = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    stop: Tuple[str, ...] = ()
    logit_bias: Tuple[Tuple[int, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
    model: Optional[str]
    prompts: Tuple[Union[str, Tuple[int, ...]], ...]
    sampling: Sampling
    echo: bool = False
    stream: bool = False
    include_usage: bool = False


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    model: Optional[str]
    messages: Tuple[Tuple[str, str], ...]  # (role, text)
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False


# Field checks: each returns the value or raises OpenAIError(400) naming the field.

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(body, field, default, low, high, low_open=False):
    value = body.get(field)
    if value is None:
        return default
    if not _is_number(value) or value < low or value > high or (low_open and value == low):
        bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise bad_request(f"{field}: expected a number in {bound}, got {json.dumps(value)}", field)
    return float(value)


def _bool(body, field, default=False):
    value = body.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{field}: expected true or false, got {json.dumps(value)}", field)
    return value


def _positive_int(body, field):
    value = body.get(field)
    if value is not None and (not _is_int(value) or value < 1):
        raise bad_request(f"{field}: expected an integer of at least 1, got {json.dumps(value)}", field)
    return value


def _stop(body):
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops)
            or len(stops) > MAX_STOP_SEQUENCES):
        raise bad_request(f"stop: expected a non-empty string or a list of up to {MAX_STOP_SEQUENCES} non-empty "
                          f"strings, got {json.dumps(value)}", "stop")
    return tuple(stops)


def _logit_bias(body):
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad_request("logit_bias: expected an object of token id to bias in [-100, 100]", "logit_bias")
    biases = []
    for token, bias in value.items():
        if not str(token).isdigit() or not _is_number(bias) or not -100 <= bias <= 100:
            raise bad_request(f"logit_bias: expected token ids (integers) mapped to biases in [-100, 100], got "
                              f"{json.dumps({token: bias})}", "logit_bias")
        biases.append((int(token), float(bias)))
    return tuple(sorted(biases))


def _seed(body):
    value = body.get("seed")
    if value is not None and not _is_int(value):
        raise bad_request(f"seed: expected an integer, got {json.dumps(value)}", "seed")
    if value is not None and not -(2 ** 63) <= value < 2 ** 64:
        raise bad_request(f"seed: expected a 64-bit integer, got {value}", "seed")
    return value


def _refuse(body, field, message, allowed=(None,)):
    if field in body and body[field] not in allowed:
        raise bad_request(f"{field}: {message}", field)


def _check_fields(body, accepted):
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object")
    for field in body:
        if field not in accepted:
            raise bad_request(f"Unrecognized request argument supplied: {field}", field)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request(f"model: expected a string, got {json.dumps(model)}", "model")
    _refuse(body, "n", "only 1 choice per request is supported", (None, 1))
    _refuse(body, "logprobs", "log probabilities are not returned by this server", (None, False, 0))


def _stream(body):
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("stream_options: only allowed when stream is true", "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
        raise bad_request(f"stream_options: expected {{\"include_usage\": true|false}}, got {json.dumps(options)}",
                          "stream_options")
    return stream, _bool(options, "include_usage")


def _sampling(body, max_tokens):
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=_top_k(body),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 2.0, low_open=True),
        seed=_seed(body),
        stop=_stop(body),
        logit_bias=_logit_bias(body),
    )


def _top_k(body):
    value = body.get("top_k")
    if value is None or value == -1:
        return 0
    if not _is_int(value) or value < 0:
        raise bad_request(f"top_k: expected -1 (off) or a non-negative integer, got {json.dumps(value)}", "top_k")
    return value


def _prompts(value):
    """A completion's prompt: a string, a list of strings, a list of token ids, or a list of such lists."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value:
        if all(_is_int(t) and t >= 0 for t in value):
            return (tuple(value),)
        if all(isinstance(p, str) for p in value):
            return tuple(value)
        if all(isinstance(p, list) and p and all(_is_int(t) and t >= 0 for t in p) for p in value):
            return tuple(tuple(p) for p in value)
    raise bad_request("prompt: expected a string, a list of strings, a list of token ids or a list of lists of "
                      "token ids", "prompt")


def parse_completion(body):
    """The CompletionRequest of a POST /v1/completions body; OpenAIError(400) naming what is wrong."""
    _check_fields(body, _COMMON + _COMPLETION_ONLY)
    if body.get("prompt") is None:
        raise bad_request("prompt: this field is required", "prompt")
    _refuse(body, "suffix", "inserting text before a suffix is not supported", (None, ""))
    _refuse(body, "best_of", "only 1 is supported", (None, 1))
    stream, include_usage = _stream(body)
    max_tokens = _positive_int(body, "max_tokens")
    return CompletionRequest(
        model=body.get("model"), prompts=_prompts(body["prompt"]),
        sampling=_sampling(body, COMPLETIONS_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens),
        echo=_bool(body, "echo"), stream=stream, include_usage=include_usage)


def _message_text(index, content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(f"messages[{index}].content: only text parts are supported (this model takes "
                                  f"text), got a part of type {json.dumps(kind)}", "messages")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"messages[{index}].content: expected a string or a list of text parts", "messages")


def _messages(value):
    if not isinstance(value, list) or not value:
        raise bad_request("messages: expected a non-empty list of {\"role\", \"content\"} objects", "messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise bad_request(f"messages[{i}]: expected an object with role and content", "messages")
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role: expected one of {', '.join(ROLES)}, got {json.dumps(role)}",
                              "messages")
        if message.get("tool_calls"):
            raise bad_request(f"messages[{i}].tool_calls: tool calls are not supported", "messages")
        unknown = set(message) - {"role", "content", "name"}
        if unknown:
            raise bad_request(f"messages[{i}]: unsupported key {sorted(unknown)[0]!r}; accepted: role, content, "
                              "name", "messages")
        content = message.get("content")
        if content is None:
            raise bad_request(f"messages[{i}].content: this field is required", "messages")
        messages.append(("system" if role == "developer" else role, _message_text(i, content)))
    return tuple(messages)


def parse_chat(body):
    """The ChatRequest of a POST /v1/chat/completions body; OpenAIError(400) naming what is wrong."""
    _check_fields(body, _COMMON + _CHAT_ONLY)
    if body.get("messages") is None:
        raise bad_request("messages: this field is required", "messages")
    for field in ("tools", "functions"):
        _refuse(body, field, "tool and function calling is not supported by this server", (None, []))
    for field in ("tool_choice", "function_call"):
        _refuse(body, field, "tool and function calling is not supported by this server", (None, "none"))
    _refuse(body, "top_logprobs", "log probabilities are not returned by this server", (None, 0))
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise bad_request("response_format: only {\"type\": \"text\"} is supported", "response_format")
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        raise bad_request("max_tokens and max_completion_tokens: give one", "max_completion_tokens")
    max_tokens = _positive_int(body, "max_tokens") or _positive_int(body, "max_completion_tokens")
    stream, include_usage = _stream(body)
    return ChatRequest(model=body.get("model"), messages=_messages(body["messages"]),
                       sampling=_sampling(body, max_tokens), stream=stream, include_usage=include_usage)


# Responses.

def usage(prompt_tokens, completion_tokens):
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_response(request_id, created, model, choices, usage_counts):
    """choices: [(text, finish_reason)] in prompt order."""
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": reason}
                        for i, (text, reason) in enumerate(choices)],
            "usage": usage_counts}


def completion_chunk(request_id, created, model, index, text, finish_reason=None):
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def chat_response(request_id, created, model, text, finish_reason, usage_counts):
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": finish_reason}],
            "usage": usage_counts}


def chat_chunk(request_id, created, model, delta, finish_reason=None):
    return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(request_id, created, model, obj, usage_counts):
    """The last chunk of a stream with stream_options.include_usage: no choices, the usage."""
    return {"id": request_id, "object": obj, "created": created, "model": model, "choices": [],
            "usage": usage_counts}


def model_card(model_id, created, metadata):
    return {"id": model_id, "object": "model", "created": created, "owned_by": "organization-owner",
            "permission": [], "metadata": metadata}


def model_list(cards):
    return {"object": "list", "data": list(cards)}


# Server-sent events.

SSE_DONE = "data: [DONE]\n\n"


def sse(payload):
    """One server-sent event carrying `payload` as JSON."""
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def sse_error(error):
    """The event that ends a stream that failed after it started (as vLLM sends it)."""
    return sse(error.body())


def parse_sse(text):
    """The payloads of an event stream's `data:` lines, "[DONE]" as the string; for clients and tests."""
    events = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data:"):
                data = line[len("data:"):].strip()
                events.append(data if data == "[DONE]" else json.loads(data))
    return events
