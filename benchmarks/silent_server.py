"""What a server that does not answer costs a ``hetsched run`` with the ``openai`` decider.

Starts a real HTTP server on 127.0.0.1 and times the whole command (its start included) against:
nothing listening, a server that accepts every request and never answers, and one that lists its
models but never answers a chat completion. Default ``--llm-timeout`` / ``--llm-retries``.

Run: python benchmarks/silent_server.py
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = {"hang": "all"}
STOP = threading.Event()


class Handler(BaseHTTPRequestHandler):
    """Hangs on every request (``all``) or only on completions (``completions``)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if MODE["hang"] == "all":
            STOP.wait(600)
            return
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        STOP.wait(600)


def main() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    print("| server | exit | wall s | last line on stderr |")
    print("|---|---|---|---|")
    for label, base, mode in (("nothing listening", dead, "all"), ("hangs on every request", url, "all"),
                              ("lists its models, hangs on completions", url, "completions")):
        MODE["hang"] = mode
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "hetsched", "run", "chain", "-p", "agentic", "--decider",
                               "openai", "--llm-base-url", base, "--no-store"], capture_output=True, text=True,
                              timeout=900)
        last = (proc.stderr.strip().splitlines() or [""])[-1][:150]
        print(f"| {label} | {proc.returncode} | {time.perf_counter() - t0:.1f} | {last} |")
    STOP.set()
    httpd.shutdown()


if __name__ == "__main__":
    main()
