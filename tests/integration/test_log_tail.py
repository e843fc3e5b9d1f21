"""Ray's job log tail, GET /api/jobs/{id}/logs/tail: a WebSocket spoken by a raw client as Ray's
JobSubmissionClient.tail_job_logs speaks it, against a real head."""

import base64
import hashlib
import os
import socket

import pytest

from test_jobs_api import finished, job, submit


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def open_tail(torus, job_id, key=None, extra=None):
    """Sends the WebSocket handshake for the job's log tail; returns (status code, headers, socket, bytes read past
    the headers). `extra` replaces or drops (None) handshake headers."""
    address = (torus.session / "dashboard_address").read_text().strip()
    host, port = address.rsplit(":", 1)
    key = key or base64.b64encode(os.urandom(16)).decode()
    headers = {"Host": address, "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": key, "Authorization": f"Bearer {torus.token}"}
    for name, value in (extra or {}).items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall((f"GET /api/jobs/{job_id}/logs/tail HTTP/1.1\r\n" +
                  "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(4096)
        assert more, data
        data += more
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    code = int(lines[0].split()[1])
    got = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        got.setdefault(name.strip().lower(), value.strip())
    return code, got, sock, rest


def read_frames(sock, buffered):
    """Yields (opcode, payload) of the server's frames until the connection ends."""
    data = buffered

    def need(n):
        nonlocal data
        while len(data) < n:
            more = sock.recv(65536)
            if not more:
                raise EOFError
            data += more
        out, data = data[:n], data[n:]
        return out

    while True:
        try:
            first, second = need(2)
        except EOFError:
            return
        assert first & 0x80, "every frame is whole (FIN)"
        assert not second & 0x80, "a server never masks"
        length = second & 0x7F
        if length == 126:
            length = int.from_bytes(need(2), "big")
        elif length == 127:
            length = int.from_bytes(need(8), "big")
        yield first & 0x0F, need(length)


def test_log_tail_streams_output_as_it_is_written_then_closes(cluster):
    job_id = submit(cluster, entrypoint="echo one; sleep 2; echo two; printf 'caf\\303\\251 \\377\\n'")
    key = base64.b64encode(os.urandom(16)).decode()
    code, headers, sock, rest = open_tail(cluster, job_id, key=key)
    with sock:
        assert code == 101, headers
        assert headers["upgrade"].lower() == "websocket"
        assert headers["sec-websocket-accept"] == base64.b64encode(
            hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        texts, close = [], None
        for opcode, payload in read_frames(sock, rest):
            if opcode == 0x1:
                texts.append(payload.decode("utf-8"))  # text frames are UTF-8
                if len(texts) == 1:
                    # Sent while the job still runs, not after it ended.
                    assert texts[0] == "one\n"
                    assert job(cluster, job_id)["status"] == "RUNNING"
            elif opcode == 0x8:
                close = payload
                break
    assert "".join(texts) == "one\ntwo\ncaf\u00e9 \ufffd\n"
    assert close is not None and int.from_bytes(close[:2], "big") == 1000
    assert job(cluster, job_id)["status"] == "SUCCEEDED"


def test_log_tail_of_an_ended_job_sends_all_its_output_and_closes(cluster):
    job_id = submit(cluster, entrypoint="seq 1 20000")
    finished(cluster, job_id)
    code, _, sock, rest = open_tail(cluster, job_id)
    with sock:
        assert code == 101
        frames = list(read_frames(sock, rest))
    assert "".join(p.decode() for op, p in frames if op == 0x1) == "".join(f"{i}\n" for i in range(1, 20001))
    assert frames[-1][0] == 0x8 and int.from_bytes(frames[-1][1][:2], "big") == 1000


@pytest.mark.parametrize("extra, message", [
    ({"Upgrade": None}, "this is a WebSocket endpoint: the request needs the header Upgrade: websocket "
                        "(and Connection: Upgrade)"),
    ({"Connection": "keep-alive"}, "header Connection must name Upgrade for a WebSocket handshake"),
    ({"Sec-WebSocket-Version": "8"}, "header Sec-WebSocket-Version must be 13"),
    ({"Sec-WebSocket-Key": "c2hvcnQ="}, "header Sec-WebSocket-Key must be 16 bytes in base64"),
])
def test_log_tail_refuses_a_request_that_is_not_a_websocket_handshake(cluster, extra, message):
    job_id = submit(cluster, entrypoint="echo x")
    code, headers, sock, rest = open_tail(cluster, job_id, extra=extra)
    with sock:
        body = rest
        while len(body) < int(headers.get("content-length", "0")):
            body += sock.recv(4096)
    assert code == 400
    assert body.decode() == message
    assert headers["sec-websocket-version"] == "13"


def test_log_tail_of_an_unknown_job_is_404(cluster):
    code, headers, sock, rest = open_tail(cluster, "no-such-job")
    with sock:
        body = rest
        while len(body) < int(headers.get("content-length", "0")):
            body += sock.recv(4096)
    assert code == 404
    assert body.decode() == "Job no-such-job does not exist"
