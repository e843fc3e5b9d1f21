"""A small replica for the service tests: rank 0 of its gang serves HTTP on $TORUS_SERVE_PORT.

  GET /health            200 "ok" (503 while the file $ECHO_UNHEALTHY_FILE exists)
  any other request      200 JSON {"path", "method", "body", "version", "pid", "prefix", "run"}; ?sleep=S waits S seconds
                         first; ?chunks=N answers in N chunks 0.2 s apart (Transfer-Encoding: chunked)

SIGTERM: stops accepting, finishes the requests in flight, exits 0.
"""
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _answer(self, code, body, content_type="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode(errors="replace") if length else ""
        if url.path == "/health":
            unhealthy = os.environ.get("ECHO_UNHEALTHY_FILE")
            if unhealthy and os.path.exists(unhealthy):
                self._answer(503, "unhealthy", "text/plain")
            else:
                self._answer(200, "ok", "text/plain")
            return
        query = parse_qs(url.query)
        if "sleep" in query:
            time.sleep(float(query["sleep"][0]))
        answer = {"path": self.path, "method": self.command, "body": body, "version": os.environ.get("ECHO_VERSION", ""),
                  "pid": os.getpid(), "prefix": self.headers.get("X-Forwarded-Prefix", ""),
                  "run": os.environ.get("TORUS_RUN_ID", "")}
        chunks = int(query.get("chunks", ["0"])[0])
        if chunks:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(chunks):
                data = f"data: {i}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.2)
            self.wfile.write(b"0\r\n\r\n")
            return
        self._answer(200, json.dumps(answer))

    do_GET = _handle
    do_POST = _handle


def main():
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ["TORUS_SERVE_PORT"])), Handler)
    server.daemon_threads = False
    server.block_on_close = True
    if int(os.environ.get("RANK", "0")) != 0:
        server.server_close()
        signal.sigwait([signal.SIGTERM])  # an engine worker of the gang: nothing to serve
        return 0

    def stop(signum, frame):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"echo serving on {server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()  # waits for the requests in flight
    return 0


if __name__ == "__main__":
    sys.exit(main())
