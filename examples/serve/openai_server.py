"""An OpenAI-compatible HTTP server for a tiny byte-level language model split across the hosts of a gang.

Deployed as a torus service (`torus serve deploy`), every replica is a gang with one process per host. The runtime
sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every process, and TORUS_SERVE_PORT in rank 0's. Rank 0
listens on 0.0.0.0:$TORUS_SERVE_PORT; the other ranks are engine workers without a port.

The model is built the same way on every rank from torch.manual_seed(0) (no training, no download): byte embeddings
of the last CONTEXT bytes, LAYERS residual MLP blocks, and an output projection over the 256 byte values. The MLP
blocks are tensor-parallel: each rank holds a slice of every block's hidden units. For each generated token rank 0
broadcasts a command (op code, length, context bytes) over torch.distributed (gloo, CPU), every rank runs its
slice, the partial outputs are summed with one all_reduce per block, and rank 0 picks the next byte greedily among
lowercase letters, space, comma and period (bytes already in the context made less likely, so the text does not
loop at once): the same prompt always gives the same text. One token is one byte. While idle, rank 0 broadcasts a
ping every few seconds, so a worker notices a dead rank 0 within the gloo timeout.

Endpoints (rank 0): GET /health (200 "ok" once every rank holds its slice; nothing listens before), GET /v1/models,
POST /v1/completions and POST /v1/chat/completions, both with "stream": true for server-sent events (one per token,
then `data: [DONE]`). Other environment: MODEL_ID (default torus-tiny), SERVE_TOKEN_DELAY_S (seconds to sleep per
generated token, default 0), TORUS_RUN_NAME (part of system_fingerprint, which tells replicas apart).

SIGTERM (or SIGINT) on rank 0: stop accepting, finish the requests in flight, tell the workers to stop, exit 0.
Workers wait for rank 0 (a signal only gets a log line), exit 0 when told to stop, and 1 if they lose rank 0;
rank 0 exits 1 if it loses a worker. Two ranks on one machine, then `python3 client.py --url http://127.0.0.1:8000`:

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python3 openai_server.py &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 TORUS_SERVE_PORT=8000 python3 openai_server.py
"""

import datetime
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

VOCAB, DIM, HIDDEN, LAYERS, CONTEXT = 256, 64, 256, 4, 16
REPLY_BYTES = torch.tensor(list(b" abcdefghijklmnopqrstuvwxyz,."))   # the bytes a reply may contain
REPETITION_PENALTY = 1.0                            # subtracted from a byte's logit per use in the context
OP_SHUTDOWN, OP_STEP, OP_PING = 0, 1, 2             # command = [op, length, CONTEXT context bytes]
DEFAULT_MAX_TOKENS, MAX_TOKENS_CAP = 16, 512
HEARTBEAT_S = 5.0
GLOO_TIMEOUT = datetime.timedelta(seconds=60)

RANK = int(os.environ.get("RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
MODEL_ID = os.environ.get("MODEL_ID", "torus-tiny")
TOKEN_DELAY_S = float(os.environ.get("SERVE_TOKEN_DELAY_S", "0") or 0)
FINGERPRINT = f"{os.environ.get('TORUS_RUN_NAME', 'local')}-{RANK}"
CREATED = int(time.time())


class ShardedModel:
    """The full model built from seed 0 on every rank, of which this rank keeps its slice of hidden units."""

    def __init__(self, rank, world_size):
        torch.manual_seed(0)
        self.embed = torch.randn(VOCAB, DIM)
        self.position = torch.linspace(1.0, 0.25, CONTEXT)   # recent bytes weigh more
        mine = torch.tensor_split(torch.arange(HIDDEN), world_size)[rank]
        self.blocks = []
        for _ in range(LAYERS):
            w_in = torch.randn(HIDDEN, DIM) / math.sqrt(DIM)
            w_out = torch.randn(DIM, HIDDEN) / math.sqrt(HIDDEN)
            self.blocks.append((w_in[mine].clone(), w_out[:, mine].clone()))
        self.unembed = torch.randn(VOCAB, DIM) / math.sqrt(DIM)

    def hidden(self, command):
        """Runs every block on the command's context; all ranks call this together (one all_reduce per block)."""
        length = int(command[1])
        recent_first = command[2:2 + length].flip(0)
        x = torch.layer_norm((self.embed[recent_first] * self.position[:length, None]).sum(0), (DIM,))
        for w_in, w_out in self.blocks:
            partial = w_out @ torch.relu(w_in @ x)
            if dist.is_initialized():
                dist.all_reduce(partial)
            x = torch.layer_norm(x + partial, (DIM,))
        return x

    def next_byte(self, x, command):
        """Greedy choice among REPLY_BYTES, each byte already in the context made less likely."""
        logits = self.unembed @ x
        context = command[2:2 + int(command[1])]
        logits.index_add_(0, context, torch.full((len(context),), -REPETITION_PENALTY))
        return int(REPLY_BYTES[torch.argmax(logits[REPLY_BYTES])])


def make_command(op, context=()):
    command = torch.zeros(2 + CONTEXT, dtype=torch.int64)
    context = list(context)[-CONTEXT:]
    command[0], command[1] = op, len(context)
    command[2:2 + len(context)] = torch.tensor(context, dtype=torch.int64)
    return command


class EngineStopped(Exception):
    pass


class Engine:
    """Rank 0's side of the model: one command (and so one set of collectives) at a time."""

    def __init__(self, model):
        self.model, self.lock = model, threading.Lock()
        self.stopped, self.failed = False, False

    def _run(self, op, context=()):
        with self.lock:
            if self.stopped:
                raise EngineStopped("the server is shutting down")
            command = make_command(op, context)
            try:
                if dist.is_initialized():
                    dist.broadcast(command, src=0)
                if op == OP_STEP:
                    return self.model.next_byte(self.model.hidden(command), command)
            except RuntimeError as error:
                self.stopped = self.failed = True
                print(f"rank 0: lost contact with the other ranks: {error}", file=sys.stderr, flush=True)
                raise EngineStopped("the model's workers are gone") from error
            if op == OP_SHUTDOWN:
                self.stopped = True
        return None

    def next_byte(self, context):
        return self._run(OP_STEP, context)

    def ping(self):
        self._run(OP_PING)

    def shutdown(self):
        self._run(OP_SHUTDOWN)


def generate(engine, prompt_bytes, max_tokens):
    """Yields the reply one token (one character) at a time."""
    context = list(prompt_bytes)
    for _ in range(max_tokens):
        token = engine.next_byte(context)
        context.append(token)
        if TOKEN_DELAY_S > 0:
            time.sleep(TOKEN_DELAY_S)
        yield chr(token)


class RequestError(Exception):
    def __init__(self, message, status=400, kind="invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


def parse_common(body):
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", MODEL_ID)
    if model != MODEL_ID:
        raise RequestError(f"model: '{model}' does not exist; this server has '{MODEL_ID}'", 404)
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError("max_tokens: must be a positive integer")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream: must be true or false")
    return min(max_tokens, MAX_TOKENS_CAP), stream


def completion_prompt(body):
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise RequestError("prompt: must be a string or a list of one string")
    return prompt


def chat_prompt(body):
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: must be a non-empty list of {role, content} objects")
    lines = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise RequestError(f"messages[{i}]: must be an object with string role and content")
        lines.append(f"{message['role']}: {message['content']}\n")
    return "".join(lines) + "assistant: "


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "torus-serve/1"
    timeout = 120                                       # an idle keep-alive connection is closed after this

    def log_request(self, code="-", size="-"):
        print(f"{self.address_string()} {self.command} {self.path} {code}", file=sys.stderr, flush=True)

    def send_body(self, status, body, content_type="application/json"):
        data = (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.server.draining or self.close_connection:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def send_error_body(self, status, message, kind="invalid_request_error"):
        self.send_body(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})

    def do_GET(self):
        self.dispatch({"/health": self.health, "/v1/models": self.models})

    def do_POST(self):
        self.dispatch({"/v1/completions": lambda: self.complete(chat=False),
                       "/v1/chat/completions": lambda: self.complete(chat=True)})

    def do_other(self):
        self.dispatch({})

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_other

    def dispatch(self, routes):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        with self.server.in_flight:
            self.server.requests += 1
        try:
            self.body = self.read_body()                # read whatever the path, so keep-alive stays in step
            if path in routes:
                routes[path]()
            elif path in ("/health", "/v1/models", "/v1/completions", "/v1/chat/completions"):
                self.send_error_body(405, f"{self.command} is not allowed on {path}")
            else:
                self.send_error_body(404, f"no such endpoint: {path}", "not_found_error")
        except RequestError as error:
            self.send_error_body(error.status, str(error), error.kind)
        except EngineStopped as error:
            self.send_error_body(503, str(error), "server_error")
        except OSError:                                 # the client went away or stopped reading
            self.close_connection = True
        finally:
            with self.server.in_flight:
                self.server.requests -= 1
                self.server.in_flight.notify_all()

    def health(self):
        if self.server.draining:
            self.send_body(503, "draining\n", "text/plain")
        else:
            self.send_body(200, "ok\n", "text/plain")

    def models(self):
        self.send_body(200, {"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": CREATED, "owned_by": "torus"}]})

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise RequestError("the request body must be sent with Content-Length, not chunked")
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit():
            self.close_connection = True
            raise RequestError("Content-Length: must be a non-negative integer")
        return self.rfile.read(int(length))

    def read_json(self):
        try:
            return json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError) as error:
            raise RequestError(f"the request body is not valid JSON: {error}") from None

    def complete(self, chat):
        body = self.read_json()
        max_tokens, stream = parse_common(body)
        prompt_bytes = (chat_prompt(body) if chat else completion_prompt(body)).encode("utf-8")
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24], "created": int(time.time()),
                "model": MODEL_ID, "system_fingerprint": FINGERPRINT}
        tokens = generate(self.server.engine, prompt_bytes, max_tokens)
        if stream:
            self.stream(head, tokens, max_tokens, chat)
            return
        text = "".join(tokens)
        usage = {"prompt_tokens": len(prompt_bytes), "completion_tokens": max_tokens,
                 "total_tokens": len(prompt_bytes) + max_tokens}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length",
                      "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        self.send_body(200, {**head, "object": "chat.completion" if chat else "text_completion",
                             "choices": [choice], "usage": usage})

    def stream(self, head, tokens, max_tokens, chat):
        first = next(tokens)                            # a failure before the first token still gets a JSON error
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for i, token in enumerate(itertools.chain([first], tokens)):
                finish = "length" if i == max_tokens - 1 else None
                if chat:
                    delta = {"role": "assistant", "content": token} if i == 0 else {"content": token}
                    chunk = {**head, "object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
                else:
                    chunk = {**head, "object": "text_completion",
                             "choices": [{"index": 0, "text": token, "finish_reason": finish, "logprobs": None}]}
                self.write_chunk(f"data: {json.dumps(chunk)}\n\n")
            self.write_chunk("data: [DONE]\n\n")
        except EngineStopped:
            self.close_connection = True                # the status is sent; cut the stream short
            return
        self.wfile.write(b"0\r\n\r\n")
        if self.server.draining:
            self.close_connection = True

    def write_chunk(self, text):
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def serve(engine):
    """Rank 0: HTTP until SIGTERM/SIGINT, then drain and stop the workers. Returns the exit status."""
    port = int(os.environ.get("TORUS_SERVE_PORT", "8000"))
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.engine, server.draining, server.requests = engine, False, 0
    server.in_flight = threading.Condition()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def heartbeat():
        while not stop.wait(HEARTBEAT_S):
            try:
                engine.ping()
            except EngineStopped:
                stop.set()

    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    if dist.is_initialized():
        threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    print(f"serving {MODEL_ID} on port {port} (world size {WORLD_SIZE})", flush=True)
    while not stop.wait(1.0) and not engine.failed:
        pass
    print("rank 0: stopping; finishing the requests in flight", file=sys.stderr, flush=True)
    server.draining = True
    server.shutdown()                                   # no new connections
    with server.in_flight:
        server.in_flight.wait_for(lambda: server.requests == 0)
    server.server_close()
    if not engine.failed:
        try:
            engine.shutdown()
        except EngineStopped:
            pass
    return 1 if engine.failed else 0


def work(model):
    """Ranks other than 0: run each command rank 0 broadcasts until it says shutdown. Returns the exit status."""
    for signum in (signal.SIGTERM, signal.SIGINT):      # rank 0 decides when the gang stops
        signal.signal(signum, lambda *_: print(f"rank {RANK}: signal received; waiting for rank 0 to stop",
                                               file=sys.stderr, flush=True))
    command = make_command(OP_PING)
    while True:
        try:
            dist.broadcast(command, src=0)
            if int(command[0]) == OP_STEP:
                model.hidden(command)
        except RuntimeError as error:
            print(f"rank {RANK}: lost contact with rank 0, exiting: {error}", file=sys.stderr, flush=True)
            return 1
        if int(command[0]) == OP_SHUTDOWN:
            return 0


def main():
    if WORLD_SIZE > 1:
        dist.init_process_group("gloo", init_method="env://", rank=RANK, world_size=WORLD_SIZE, timeout=GLOO_TIMEOUT)
    model = ShardedModel(RANK, WORLD_SIZE)
    if dist.is_initialized():
        dist.barrier()                                  # every rank holds its slice before rank 0 listens
    status = serve(Engine(model)) if RANK == 0 else work(model)
    if dist.is_initialized() and status == 0:
        dist.destroy_process_group()
    print(f"rank {RANK}: exiting with status {status}", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
