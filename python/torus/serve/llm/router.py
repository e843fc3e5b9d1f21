"""OpenAiIngress: the OpenAI API of several models, each an LLMServer deployment reached by a DeploymentHandle.

Routes as LLMServer's (deployment.ENDPOINTS), on the app each replica builds (__serve_build_asgi_app__).
/v1/models gathers every model's card; a completion or chat request is checked for its "model" (400 when missing,
since several models are served; 404 naming it when unknown) and passed with its JSON body to that model's
LLMServer.openai_call through a streaming handle, whose first item says whether a JSON body or a stream of
server-sent events follows. build_router_app binds it over the models' applications. Used on one event loop.
"""

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from torus.serve.llm import protocol
from torus.serve.llm.deployment import build_asgi_app, error_response, read_json

DEFAULT_INGRESS_OPTIONS = {"max_ongoing_requests": int(1e9),
                           "autoscaling_config": {"target_ongoing_requests": int(1e6)}}


class OpenAiIngress:
    def __init__(self, llm_deployments):
        self._handles = dict(llm_deployments)
        self._streams = {m: h.options(stream=True) for m, h in self._handles.items()}

    def _model(self, model):
        if model is None:
            raise protocol.bad_request("Model parameter is required when multiple models are configured. "
                                       f"Available models: {sorted(self._handles)}", "model")
        if not isinstance(model, str) or model not in self._handles:
            raise protocol.OpenAIError(404, f'Got request for model "{model}". Could not find base model with ID '
                                            f'"{model}". Available models: {sorted(self._handles)}', "model")
        return model

    async def models(self):
        cards = [await self._handles[m].model_card.remote() for m in sorted(self._handles)]
        return JSONResponse(protocol.model_list(cards))

    async def model_data(self, model: str):
        model = model.replace("--", "/")
        if model not in self._handles:
            return error_response(protocol.OpenAIError(
                404, f"Unable to find {model}. Please ensure that the model exists and you have permission.",
                "model"))
        return JSONResponse(await self._handles[model].model_card.remote())

    async def completions(self, request: Request):
        return await self._forward(request, "completions")

    async def chat(self, request: Request):
        return await self._forward(request, "chat")

    async def check_health(self):
        pass

    def __serve_build_asgi_app__(self):
        return build_asgi_app(self)

    async def _forward(self, request, kind):
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise protocol.bad_request("The request body must be a JSON object")
            model = self._model(body.get("model"))
        except protocol.OpenAIError as e:
            return error_response(e)
        stream = self._streams[model].openai_call.remote(kind, body)
        try:
            form, status, payload = await stream.__anext__()
        except Exception as e:
            return error_response(protocol.OpenAIError(500, f"The model's server failed: {type(e).__name__}: {e}"))
        if form == "json":
            return JSONResponse(payload, status_code=status)
        return StreamingResponse(_events(stream), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _events(stream):
    try:
        async for event in stream:
            yield event
    except Exception as e:  # the model's replica went away mid-stream
        yield protocol.sse_error(protocol.OpenAIError(500, f"The model's server failed: {type(e).__name__}: {e}"))
        yield protocol.SSE_DONE


def build_router_app(args, model_apps):
    """The OpenAiIngress deployment (options: Ray's defaults under args.ingress_deployment_config) bound over
    `model_apps` ({model id: its LLMServer application})."""
    from torus import serve
    from torus.serve.llm.builder import apply_deployment_defaults
    options = apply_deployment_defaults(DEFAULT_INGRESS_OPTIONS, args.ingress_deployment_config)
    options.setdefault("name", "OpenAiIngress")
    return serve.deployment(serve.ingress()(OpenAiIngress), **options).bind(llm_deployments=model_apps)


__all__ = ["OpenAiIngress", "build_router_app"]
