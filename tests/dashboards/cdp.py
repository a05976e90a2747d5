"""A minimal Chrome DevTools Protocol driver for Debian's headless Chromium (no Selenium or
Playwright in the project): start the browser with its DevTools endpoint on 127.0.0.1, open a
page, wait until a script says it is ready, read the rendered DOM (frames included), take
screenshots; stop every process it started, by process group.

The WebSocket client is aiohttp's (installed with MLflow). Nothing outside 127.0.0.1 can load:
every other host name resolves nowhere and the proxy is a closed port.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=127.0.0.1:9",
]


class CDPError(RuntimeError):
    pass


class Browser:
    """`async with Browser(profile, width, height) as b: page = await b.new_page()`."""

    def __init__(self, profile: Path, width: int = 1920, height: int = 1080):
        self.profile, self.width, self.height = Path(profile), width, height
        self.proc: subprocess.Popen | None = None
        self.ws = None
        self.session = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._events: list[dict] = []
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> Browser:
        import aiohttp

        self.profile.mkdir(parents=True, exist_ok=True)
        port_file = self.profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
                break
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited with status {self.proc.returncode}")
            await asyncio.sleep(0.1)
        else:
            raise CDPError("chromium did not open its DevTools port in 60 s")
        port, path = port_file.read_text().splitlines()[:2]
        self.session = aiohttp.ClientSession()
        self.ws = await self.session.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.send("Browser.close"), 5)
        if self._reader is not None:
            self._reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        self.stop()

    def stop(self) -> None:
        """Stop chromium's whole process group (its zygote, renderers and GPU process too)."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self._pending.pop(data["id"], None) if "id" in data else None
            if fut is not None and not fut.done():
                fut.set_result(data)
            elif "method" in data:
                self._events.append(data)

    async def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        i = next(self._ids)
        msg: dict[str, Any] = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        fut = asyncio.get_running_loop().create_future()
        self._pending[i] = fut
        await self.ws.send_str(json.dumps(msg))
        data = await asyncio.wait_for(fut, timeout)
        if "error" in data:
            raise CDPError(f"{method}: {data['error']}")
        return data.get("result", {})

    async def new_page(self) -> Page:
        target = (await self.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await self.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        page = Page(self, session)
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False}
        )
        await page.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True})
        return page

    def events(self, method: str) -> list[dict]:
        return [e for e in self._events if e.get("method") == method]


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    async def send(self, method: str, params: dict | None = None, *, session: str | None = None, timeout: float = 60) -> dict:
        return await self.browser.send(method, params, session or self.session, timeout)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str, *, session: str | None = None, context: int | None = None) -> Any:
        params: dict[str, Any] = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if context is not None:
            params["contextId"] = context
        res = await self.send("Runtime.evaluate", params, session=session)
        if "exceptionDetails" in res:
            raise CDPError(f"script failed: {res['exceptionDetails'].get('text')} {res['exceptionDetails'].get('exception', {})}")
        return res["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 90, every: float = 0.5) -> Any:
        """Evaluate `expression` until it is truthy; return its value (CDPError after `timeout`)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            with contextlib.suppress(CDPError):
                last = await self.evaluate(expression)
                if last:
                    return last
            await asyncio.sleep(every)
        raise CDPError(f"timed out after {timeout:.0f} s waiting for {expression[:200]!r} (last value {last!r})")

    async def frame_texts(self) -> list[str]:
        """document.body.innerText of every child frame (same-process or out-of-process)."""
        out = []
        tree = await self.send("Page.getFrameTree")
        for child in tree["frameTree"].get("childFrames", []):
            fid = child["frame"]["id"]
            with contextlib.suppress(CDPError):
                ctx = (await self.send("Page.createIsolatedWorld", {"frameId": fid, "worldName": "probe"}))["executionContextId"]
                out.append(await self.evaluate("document.body ? document.body.innerText : ''", context=ctx) or "")
        for ev in self.browser.events("Target.attachedToTarget"):  # out-of-process frames
            if ev.get("sessionId") == self.session and ev["params"]["targetInfo"].get("type") == "iframe":
                sub = ev["params"]["sessionId"]
                with contextlib.suppress(CDPError):
                    out.append(await self.evaluate("document.body ? document.body.innerText : ''", session=sub) or "")
        return out

    async def screenshot(self, path: Path) -> Path:
        data = (await self.send("Page.captureScreenshot", {"format": "png"}))["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
