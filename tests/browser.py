"""A real headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
no websocket library, no driver binary. For the HTML report tests only.

Chromium reads commands on its fd 3 and writes replies and events on its fd 4, one JSON object
per message, each ended by a NUL byte. :class:`Browser` opens one page per :meth:`load`, records
every console message, uncaught exception, log entry (CSP violations land there) and network
request, and evaluates expressions in the page.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def ensure_chromium() -> str | None:
    """Chromium's path, installing Debian's package when it is missing and this user can; None if not."""
    path = chromium_path()
    if path or shutil.which("apt-get") is None or os.geteuid() != 0:
        return path
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    if subprocess.run(cmd, env=env, capture_output=True, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        subprocess.run(cmd, env=env, capture_output=True, timeout=900)
    return chromium_path()


def require_chromium() -> str:
    """Chromium's path (installed when missing, see :func:`ensure_chromium`). Where it cannot be had,
    the browser tests skip with the reason, except under CI (``CI`` set to true/1/yes): CI runs as
    root with apt-get, so a missing browser there is a broken set-up, and the tests fail."""
    import pytest

    path = ensure_chromium()
    if path is not None:
        return path
    why = "chromium is not installed and cannot be installed here (needs root, apt-get and Debian's package)"
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"CI={os.environ['CI']}: {why}; the HTML report tests must run in CI", pytrace=False)
    pytest.skip(why)


class Page:
    """What one loaded page did."""

    def __init__(self):
        self.console: list[dict] = []
        self.exceptions: list[dict] = []
        self.log: list[dict] = []
        self.requests: list[str] = []

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (a CSP violation is one)."""
        out = [json.dumps(c.get("args")) for c in self.console if c.get("type") in ("error", "assert")]
        out += [json.dumps(e.get("exceptionDetails", {}).get("text")) for e in self.exceptions]
        out += [e["entry"].get("text", "") for e in self.log if e["entry"].get("level") == "error"]
        return out


class Browser:
    def __init__(self, executable: str):
        self._profile = tempfile.TemporaryDirectory()
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds():  # the child's fd 3 reads commands, fd 4 writes replies (inheritable across exec)
            high_r, high_w = os.dup2(to_chrome_r, 200), os.dup2(from_chrome_w, 201)  # out of 3 and 4's way
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            close_fds=False,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict] = []

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read(timeout=60)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buffer += chunk
        msg, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(msg)

    def load(self, url: str, settle: float = 0.5) -> tuple[Page, str]:
        """Open ``url`` in a fresh tab and wait for its load event: (what it did, session id)."""
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self._send(f"{domain}.enable", session=session)
        self._events.clear()
        self._send("Page.navigate", {"url": url}, session=session)
        page, loaded, deadline = Page(), False, time.monotonic() + 60
        while not loaded and time.monotonic() < deadline:
            events, self._events = self._events, []
            loaded = any([self._record(page, session, ev) for ev in events])
            if not loaded:
                self._events.append(self._read(timeout=max(0.1, deadline - time.monotonic())))
        if not loaded:
            raise TimeoutError(f"{url} did not load")
        end = time.monotonic() + settle  # late console messages and requests
        while time.monotonic() < end:
            try:
                self._record(page, session, self._read(timeout=end - time.monotonic()))
            except TimeoutError:
                break
        return page, session

    @staticmethod
    def _record(page: Page, session: str, ev: dict) -> bool:
        """File one event of ``session`` under ``page``; True for the load event."""
        if ev.get("sessionId") != session:
            return False
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled":
            page.console.append(params)
        elif method == "Runtime.exceptionThrown":
            page.exceptions.append(params)
        elif method == "Log.entryAdded":
            page.log.append(params)
        elif method == "Network.requestWillBeSent":
            page.requests.append(params["request"]["url"])
        return method == "Page.loadEventFired"

    def evaluate(self, session: str, expression: str):
        """The JSON value of ``expression`` evaluated in the page."""
        result = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("text"))
        return result["result"].get("value")

    def screenshot(self, session: str) -> bytes:
        data = self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session)
        return base64.b64decode(data["data"])

    def viewport_screenshot(self, session: str, width: int, height: int, scale: float = 1.0, selector=None) -> bytes:
        """A PNG of a ``width`` × ``height`` CSS-pixel viewport at ``scale`` device pixels per CSS pixel
        (the image is width·scale × height·scale), scrolled to the first ``selector`` match if given."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False}
        self._send("Emulation.setDeviceMetricsOverride", metrics, session=session)
        if selector is not None:
            self.evaluate(session, f"document.querySelector({json.dumps(selector)}).scrollIntoView()")
        data = self._send("Page.captureScreenshot", {"format": "png"}, session=session)
        return base64.b64decode(data["data"])

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._profile.cleanup()
