"""An endpoint that answers every request with an HTML page (a captive portal, a web server at
the wrong port, a proxy's error page): what gatesweep must refuse as an object store, naming it.

A thread of the test's own process serves it on 127.0.0.1 (a subprocess of the test reaches it
too); `stop()` shuts it down. `status` is the HTTP status of every answer (200 by default: the
hardest case, a page that looks like success); `requests` counts what was asked, by method.
"""

from __future__ import annotations

import http.server
import threading
from collections import Counter

PAGE = b"<!DOCTYPE html>\n<html><head><meta charset=utf-8><title>Welcome</title></head><body><h1>It works!</h1></body></html>\n"


class HtmlEndpoint:
    def __init__(self, status: int = 200):
        self.status = status
        self.requests: Counter[str] = Counter()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.requests[self.command] += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.send_response(outer.status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(PAGE)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(PAGE)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="html-endpoint", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> HtmlEndpoint:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
