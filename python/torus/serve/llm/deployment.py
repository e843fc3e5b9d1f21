"""LLMServer: the OpenAI-compatible HTTP face of one model (ray.serve.llm.LLMServer's place in torus).

Routes (ENDPOINTS):
    GET  /v1/models                 the model's card (a list of one; Ray's metadata plus engine and template)
    GET  /v1/models/{model}         the card, or 404
    POST /v1/completions            protocol.parse_completion, then ModelServer.completions
    POST /v1/chat/completions       protocol.parse_chat, then ModelServer.chat
A reply is JSON, or with "stream": true server-sent events (text/event-stream) ending in "data: [DONE]". Errors
are OpenAI's error body with its status: 400 for a bad field (named), 404 for a model this server does not serve
(named), 500 for a failure of the engine.

serve.ingress()(LLMServer) makes it an ingress deployment class: each replica builds its FastAPI app from its
instance (__serve_build_asgi_app__, as Ray's LLMServer does); build_asgi_app(server) is that app, which also runs
an instance without Serve. Used on one event loop.
"""

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from torus.serve.llm import protocol
from torus.serve.llm.server import ModelServer

ENDPOINTS = {  # method name: (HTTP method, path)
    "models": ("GET", "/v1/models"),
    "model_data": ("GET", "/v1/models/{model:path}"),
    "completions": ("POST", "/v1/completions"),
    "chat": ("POST", "/v1/chat/completions"),
}


def error_response(error):
    return JSONResponse(error.body(), status_code=error.status)


def reply_response(reply):
    if reply.events is not None:
        return StreamingResponse(reply.events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return JSONResponse(reply.body)


async def read_json(request):
    raw = await request.body()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise protocol.bad_request(f"The request body is not valid JSON: {e}") from e


class LLMServer:
    """Serves one LLMConfig's model over the OpenAI API. `engine_factory` replaces llama.cpp in tests."""

    def __init__(self, llm_config, *, engine_factory=None):
        self._server = ModelServer(llm_config, engine_factory=engine_factory)

    @property
    def model_id(self):
        return self._server.model_id

    def _check_model(self, model):
        if model is not None and model != self.model_id:
            raise protocol.OpenAIError(404, f'Got request for model "{model}". Could not find base model with ID '
                                            f'"{model}". Available models: ["{self.model_id}"]', "model")

    async def models(self):
        return JSONResponse(protocol.model_list([self._server.model_card()]))

    async def model_data(self, model: str):
        try:
            self._check_model(model.replace("--", "/"))
        except protocol.OpenAIError:
            return error_response(protocol.OpenAIError(
                404, f"Unable to find {model}. Please ensure that the model exists and you have permission.",
                "model"))
        return JSONResponse(self._server.model_card())

    async def completions(self, request: Request):
        return await self._serve_http(request, "completions")

    async def chat(self, request: Request):
        return await self._serve_http(request, "chat")

    async def check_health(self):
        await self._server.check_health()

    def __serve_build_asgi_app__(self):
        """The replica's ASGI app (serve.ingress() without an app builds it here, as Ray's LLMServer does)."""
        return build_asgi_app(self)

    async def model_card(self):
        """The model's /v1/models entry (for a router in front of several models)."""
        return self._server.model_card()

    async def openai_call(self, kind, body):
        """A router's call (through a streaming DeploymentHandle): `kind` "completions" or "chat" with the
        request's JSON body; yields ("json", status, body) for a JSON reply or an error, or ("events", 200, None)
        followed by the stream's server-sent events."""
        try:
            reply = await self._answer(kind, body)
        except protocol.OpenAIError as e:
            yield ("json", e.status, e.body())
            return
        if reply.events is None:
            yield ("json", 200, reply.body)
            return
        yield ("events", 200, None)
        async for event in reply.events:
            yield event

    async def _answer(self, kind, body):
        parsed = (protocol.parse_completion if kind == "completions" else protocol.parse_chat)(body)
        self._check_model(parsed.model)
        try:
            return await (self._server.completions if kind == "completions" else self._server.chat)(parsed)
        except protocol.OpenAIError:
            raise
        except Exception as e:  # the engine failed before a reply began
            raise protocol.OpenAIError(500, f"{type(e).__name__}: {e}") from e

    async def _serve_http(self, request, kind):
        try:
            return reply_response(await self._answer(kind, await read_json(request)))
        except protocol.OpenAIError as e:
            return error_response(e)


def build_asgi_app(server):
    """A FastAPI app answering ENDPOINTS with `server`'s methods (an LLMServer or an OpenAiIngress)."""
    from fastapi import FastAPI
    app = FastAPI()
    for name, (method, path) in ENDPOINTS.items():
        app.add_api_route(path, getattr(server, name), methods=[method])
    return app
