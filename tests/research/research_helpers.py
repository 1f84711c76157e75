"""Helpers for the research tests: corpora, programs, a scripted local HTTP server."""

from __future__ import annotations

import socket
import subprocess
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ATOM = """<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>arXiv Query</title>
  <entry>
    <id>http://arxiv.org/abs/2401.00001v1</id>
    <published>2024-01-01T00:00:00Z</published>
    <title>Fused RMS Normalization for
      Memory-Bound Decoding</title>
    <summary>We fuse the RMS norm with the following multiply, saving a round trip
      through memory in batch-1 decoding.</summary>
    <author><name>A. Author</name></author>
  </entry>
</feed>
"""

PLANTED = '''\
import time


def planted_hot(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def cold():
    time.sleep(0.001)


def main():
    t = time.perf_counter()
    k = 0
    while time.perf_counter() - t < 1.5:
        planted_hot(300000)
        cold()
        k += 1
    print(f"METRIC throughput={k / (time.perf_counter() - t):.3f}")


main()
'''


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real http.server on 127.0.0.1 that answers from a script of responses."""

    def __init__(self, script: list[tuple[int, dict[str, str], str]]) -> None:
        self.script = script
        self.paths: list[str] = []
        self.times: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                import time

                server.paths.append(self.path)
                server.times.append(time.monotonic())
                i = min(len(server.paths) - 1, len(server.script) - 1)
                code, headers, body = server.script[i]
                data = body.encode()
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t",
                        "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(root)})


