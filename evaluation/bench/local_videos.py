"""A video server on 127.0.0.1 for `vi download`'s tests and `make bench`: real MP4 bytes, and the
failures a video host gives, on purpose, so yt-dlp meets them without the internet.

    /v/NAME             the file (Range requests answered with 206, as yt-dlp resumes with them)
    /missing/NAME       404
    /busy/NAME          429 with Retry-After for the first `busy_times` requests, then the file
    /limited/NAME       429 with Retry-After, always
    /drop/NAME          half the file, then the connection closed, always
    /drop-first/NAME    the same for the first `drop_times` requests, then the file

`latency_s` and `bytes_per_s` make each response wait and trickle, as a remote host does, so that
downloads in flight at once can be measured against one at a time.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 16 * 1024


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a client hanging up mid-response is what some routes are for: no traceback on stderr


class VideoServer:
    def __init__(self, files: dict[str, bytes], *, retry_after: int = 1, busy_times: int = 1,
                 drop_times: int = 2, latency_s: float = 0.0, bytes_per_s: float | None = None):
        self.files, self.retry_after, self.busy_times, self.drop_times = files, retry_after, busy_times, drop_times
        self.latency_s, self.bytes_per_s = latency_s, bytes_per_s
        self.hits: Counter[str] = Counter()
        self.peers: set[str] = set()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, route: str, name: str) -> str:
        return f"{self.base}/{route}/{name}"

    def __enter__(self) -> VideoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, path: str) -> int:
        with self._lock:
            self.hits[path] += 1
            return self.hits[path]

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: the tests read the counters
                pass

            def do_HEAD(self) -> None:
                self.do_GET(body=False)

            def do_GET(self, body: bool = True) -> None:
                server.peers.add(self.client_address[0])
                seen = server._count(self.path)
                parts = self.path.strip("/").split("/", 1)
                route, name = (parts + [""])[:2]
                data = server.files.get(name)
                if server.latency_s:
                    time.sleep(server.latency_s)
                if data is None or route == "missing":
                    return self._status(404)
                if route == "limited" or (route == "busy" and seen <= server.busy_times):
                    return self._status(429, {"Retry-After": str(server.retry_after)})
                dropping = route == "drop" or (route == "drop-first" and seen <= server.drop_times)
                start = 0
                ranged = self.headers.get("Range", "")
                if ranged.startswith("bytes=") and not dropping:
                    start = int(ranged[6:].split("-")[0] or 0)
                if start >= len(data) > 0:
                    return self._status(416, {"Content-Range": f"bytes */{len(data)}"})
                self.send_response(206 if start else 200)
                self.send_header("Content-Type", "video/mp4")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                end = len(data) // 2 if dropping else len(data)
                try:
                    for at in range(start, end, CHUNK):
                        piece = data[at:min(at + CHUNK, end)]
                        self.wfile.write(piece)
                        if server.bytes_per_s:
                            time.sleep(len(piece) / server.bytes_per_s)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client stopped reading (yt-dlp sniffs the first bytes, then hangs up)
                if dropping:
                    self.close_connection = True
                    self.connection.close()

            def _status(self, code: int, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler
