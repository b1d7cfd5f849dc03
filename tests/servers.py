"""Real servers for the remote tests: an HTTP server that honours Range requests and counts
what it sends, a fault injector that sits between a client and any HTTP server, and moto's
standalone S3 server in a process of its own. `python tests/servers.py FOLDER` serves a folder
(scripts/bench/bench_remote.py)."""
from __future__ import annotations

import base64
import email.utils
import http.client
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
SECRET = "s3cr3t-Passw0rd"   # what the private folder wants: must never appear in messages


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler, **state):
        super().__init__(("127.0.0.1", 0), handler)
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.ranges: list = []   # (method, start, end) of every request answered
        self.__dict__.update(state)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, **amounts) -> None:
        with self.lock:
            self.counts.update(amounts)

    def count_range(self, method: str, start: int, end: int) -> None:
        with self.lock:
            self.ranges.append((method, start, end))

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.ranges.clear()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class RangeHandler(BaseHTTPRequestHandler):
    """Files of `root` by GET and HEAD, with single byte ranges, an ETag and Last-Modified.
    Files under `private/` need HTTP basic auth user:SECRET or `?token=SECRET`; those under
    `forbidden/` are refused. A GET of `/_mark/<name>` notes the counts so far in `marks`."""

    protocol_version = "HTTP/1.1"  # keep-alive: one connection carries a reader's requests

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        server = self.server
        path, _, query = self.path.partition("?")
        if path.startswith("/_mark/"):  # a client notes the counts so far, under a name
            with server.lock:
                server.marks[path.removeprefix("/_mark/")] = dict(server.counts)
            return self._fail(200)
        server.count(requests=1)
        if path.startswith("/private/") and not self._authorized(query):
            return self._fail(401 if "Authorization" not in self.headers else 403)
        if path.startswith("/forbidden/") or server.counts["requests"] > server.deny_after:
            return self._fail(403)
        file = os.path.join(server.root, path.lstrip("/"))
        if not os.path.isfile(file):
            return self._fail(404)
        st = os.stat(file)
        start, end = 0, st.st_size
        match = _RANGE.match(self.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            end = min(st.st_size, int(match.group(2)) + 1) if match.group(2) else st.st_size
            if start >= st.st_size:
                return self._fail(416)
        server.count_range(self.command, start, end)
        self.send_response(206 if match else 200)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{st.st_size}-{st.st_mtime_ns}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{st.st_size}")
        self.end_headers()
        if body:
            self._send_file(file, start, end)

    def _send_file(self, file: str, start: int, end: int) -> None:
        # sendfile, as nginx does: a server copying bodies in Python would take the cores that
        # the client it is measured against shares with it (bench_remote.py).
        with open(file, "rb") as f:
            while start < end:
                sent = self.connection.sendfile(f, start, min(1 << 20, end - start))
                if not sent:
                    break
                start += sent
                self.server.count(bytes=sent)  # counted once written to the socket

    def _authorized(self, query: str) -> bool:
        if f"token={SECRET}" in query:
            return True
        expected = base64.b64encode(f"user:{SECRET}".encode()).decode()
        return self.headers.get("Authorization", "") == f"Basic {expected}"

    def _fail(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def range_server(root: str) -> _Server:
    """`deny_after`: from that many requests on, every request is refused (403)."""
    return _Server(RangeHandler, root=root, deny_after=float("inf"), marks={})


class FaultHandler(BaseHTTPRequestHandler):
    """Forwards every request to `backend`; by a fixed schedule over the requests it answers
    503 instead, or sends the headers and half of the body and drops the connection, or waits
    `stall` seconds (longer than the client's timeout) before dropping it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._forward()

    def do_GET(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        server = self.server
        with server.lock:
            n = server.counts["requests"]
            server.counts["requests"] += 1
        fault = server.schedule[n % len(server.schedule)] if server.faults else "pass"
        if fault == "503":
            server.count(**{"503": 1})
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, headers, payload = self._ask_backend()
        if fault == "stall":
            server.count(stalls=1)
            time.sleep(server.stall)
            self.close_connection = True
            return
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                self.send_header(key, value)
        self.end_headers()
        if fault == "cut" and self.command == "GET" and len(payload) > 1:
            server.count(cuts=1)
            self.wfile.write(payload[:len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(payload)

    def _ask_backend(self):
        length = int(self.headers.get("Content-Length", 0) or 0)
        body = self.rfile.read(length) if length else None
        connection = http.client.HTTPConnection(*self.server.backend, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


def fault_proxy(backend_url: str, schedule=("pass", "503", "pass", "cut"),
                stall: float = 0.0) -> _Server:
    host, port = backend_url.removeprefix("http://").split(":")
    return _Server(FaultHandler, backend=(host, int(port)), schedule=tuple(schedule),
                   stall=stall, faults=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """moto's standalone S3 server, in a process of its own."""

    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.close()
        raise RuntimeError("moto's S3 server did not start")

    def storage_options(self, endpoint: str | None = None, retries: bool = True) -> dict:
        """s3fs's settings; without `retries`, botocore does not ask again after an error
        status (with pauses of seconds): the loader's own retries meet those faults."""
        options = {"key": "testing", "secret": "testing",
                   "client_kwargs": {"endpoint_url": endpoint or self.url,
                                     "region_name": "eu-west-1"}}
        if not retries:
            options["config_kwargs"] = {"retries": {"total_max_attempts": 1}}
        return options

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


if __name__ == "__main__":  # serve a folder: python tests/servers.py FOLDER (prints the URL)
    served = range_server(sys.argv[1])
    print(served.url, flush=True)
    served.thread.join()
