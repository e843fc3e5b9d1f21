"""A tiny client for openai_server.py (standard library only).

Sends one streamed chat completion and prints its tokens as they arrive, then one plain completion:

    python3 examples/serve/client.py --url http://127.0.0.1:8000/llm

--url is the service's base URL: the ingress with the service's route prefix, or rank 0's port directly.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request


def post(url, body, timeout):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=timeout)


def stream_chat(base, model, content, max_tokens, timeout):
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": True}
    with post(base + "/v1/chat/completions", body, timeout) as response:
        for line in response:                           # one server-sent event line at a time
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            delta = json.loads(data)["choices"][0]["delta"]
            print(delta.get("content", ""), end="", flush=True)
    print()


def complete(base, model, prompt, max_tokens, timeout):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
    with post(base + "/v1/completions", body, timeout) as response:
        answer = json.load(response)
    print(json.dumps(answer["choices"][0]["text"]), answer["usage"], answer.get("system_fingerprint", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000/llm", help="the service's base URL")
    parser.add_argument("--model", default="torus-tiny", help="model id (default torus-tiny)")
    parser.add_argument("--prompt", default="Hello, torus!", help="the text to send")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens to generate (default 32)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per request (default 60)")
    args = parser.parse_args()
    base = args.url.rstrip("/")
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=args.timeout) as response:
            print("models:", [m["id"] for m in json.load(response)["data"]])
        print("chat (streamed): ", end="", flush=True)
        stream_chat(base, args.model, args.prompt, args.max_tokens, args.timeout)
        print("completion: ", end="", flush=True)
        complete(base, args.model, args.prompt, args.max_tokens, args.timeout)
    except urllib.error.HTTPError as error:
        print(f"\nHTTP {error.code}: {error.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as error:
        print(f"\ncannot reach {base}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
