"""A headless Chromium driven over the DevTools protocol, for UI screenshots and render tests.

The protocol runs over a pipe (``--remote-debugging-pipe``: the browser reads commands on its fd 3 and writes
answers on its fd 4, each a JSON message ended by a NUL byte), so no port is opened and only the standard library is
needed. A page is ready when its rendered text holds what the caller waits for: single-page apps such as the Dagster
UI keep fetching after ``load``, so neither the load event nor a fixed virtual-time budget says when they are done.

Usage::

    with HeadlessChromium(profile_dir) as browser:
        browser.open("http://127.0.0.1:3000/assets/dynamic_kafka/orders", wait_for=["records/east"])
        browser.click_button("Plots")
        browser.screenshot(Path("docs/plots.png"))
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any, Self

from devtools.errors import LocalBrowserError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from types import TracebackType

_POLL_S = 0.25
_COMMAND_TIMEOUT_S = 60.0
# Buttons whose own text is exactly the label (the Dagster UI's toggles hold an icon and a label).
_CLICK_JS = """(() => {
  const label = %s;
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === label);
  if (!button) return false;
  button.click();
  return true;
})()"""

# Canvases with at least one painted (non-transparent) pixel: a chart that drew something.
_DRAWN_CANVASES_JS = """[...document.querySelectorAll('canvas')].filter(c => {
  if (!c.width || !c.height) return false;
  const pixels = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) return true;
  return false;
}).length"""


def chromium_path() -> str:
    """The Chromium executable on PATH (Debian's package installs ``chromium``)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    raise LocalBrowserError(
        "No Chromium on PATH (looked for chromium, chromium-browser, google-chrome).",
        hint="Run `make setup` (scripts/setup.sh installs Debian's chromium package) or install it yourself.",
    )


class HeadlessChromium:
    """One headless Chromium with one page of a fixed size; a context manager that stops the browser."""

    def __init__(self, profile_dir: Path, *, width: int = 1600, height: int = 900) -> None:
        self.profile_dir = profile_dir
        self.width, self.height = width, height
        self._next_id = 0
        self._buffer = b""
        self._session = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._to_browser = self._from_browser = -1

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the browser and open its page."""
        commands_read, self._to_browser = os.pipe()
        self._from_browser, answers_write = os.pipe()

        def as_fd_3_and_4() -> None:
            # In the child, before exec: the protocol's fixed descriptors, inheritable (dup2 makes them so). The
            # pipes may themselves be 3 or 4, so both are copied aside first and neither is overwritten too early.
            commands, answers = os.dup(commands_read), os.dup(answers_write)
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        args = [
            chromium_path(),
            "--headless",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile_dir}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        self._process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # the parent's other descriptors are non-inheritable (PEP 446)
            preexec_fn=as_fd_3_and_4,
        )
        os.close(commands_read)
        os.close(answers_write)
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.command(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )

    def stop(self) -> None:
        """Close the browser (killed if it does not exit within 10 s) and the pipes."""
        if self._process is None:
            return
        try:
            self.command("Browser.close", session=False, timeout_s=10)
        except LocalBrowserError:
            self._process.kill()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._process = None

    def command(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = True, timeout_s: float = 0
    ) -> dict[str, Any]:
        """Send one protocol command (to the page's session unless ``session`` is False) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except OSError as e:
            raise LocalBrowserError(f"Chromium stopped reading commands ({method}): {e}.") from e
        deadline = time.monotonic() + (timeout_s or _COMMAND_TIMEOUT_S)
        while True:
            answer = self._read_message(deadline, method)
            if answer.get("id") != self._next_id:
                continue  # an event, or the answer to a command that timed out earlier
            if "error" in answer:
                raise LocalBrowserError(f"Chromium refused {method}: {answer['error'].get('message')}.")
            result: dict[str, Any] = answer.get("result", {})
            return result

    def _read_message(self, deadline: float, method: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LocalBrowserError(f"Chromium did not answer {method} in time.", hint="Is the machine loaded?")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise LocalBrowserError(f"Chromium exited while answering {method}.")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise LocalBrowserError(f"The page's script failed: {result['exceptionDetails'].get('text')}.")
        return result["result"].get("value")

    def text(self) -> str:
        """The page's rendered text (``document.body.innerText``)."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def dom(self) -> str:
        """The page's current DOM as HTML."""
        return str(self.evaluate("document.documentElement.outerHTML"))

    def wait_for_text(self, texts: Sequence[str], timeout_s: float = 120) -> str:
        """Wait until the rendered text holds every one of ``texts``; return that text."""
        deadline = time.monotonic() + timeout_s
        while True:
            shown = self.text()
            missing = [t for t in texts if t not in shown]
            if not missing:
                return shown
            if time.monotonic() > deadline:
                raise LocalBrowserError(
                    f"The page never showed {missing} within {timeout_s:.0f} s; it shows: {shown[:2000]!r}."
                )
            time.sleep(_POLL_S)

    def wait_for_drawn_canvases(self, count: int, timeout_s: float = 120) -> int:
        """Wait until at least ``count`` canvases on the page have painted pixels; return how many have.

        Charts (the Dagster UI's plots use Chart.js) draw on canvases, so their titles and axes are not page text.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            drawn = int(self.evaluate(_DRAWN_CANVASES_JS))
            if drawn >= count:
                return drawn
            if time.monotonic() > deadline:
                raise LocalBrowserError(f"The page drew {drawn} canvases within {timeout_s:.0f} s, not {count}.")
            time.sleep(_POLL_S)

    def open(self, url: str, wait_for: Sequence[str], timeout_s: float = 120) -> str:
        """Load ``url`` and wait until the page's text holds ``wait_for``; return that text."""
        self.command("Page.navigate", {"url": url})
        return self.wait_for_text(wait_for, timeout_s)

    def click_button(self, label: str) -> None:
        """Click the page's first button labelled exactly ``label``."""
        if not self.evaluate(_CLICK_JS % json.dumps(label)):
            raise LocalBrowserError(f"The page has no button labelled {label!r}.")

    def scroll_to_text(self, text: str) -> None:
        """Scroll the innermost element showing ``text`` to the top of its scrolling area."""
        script = f"""(() => {{
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          while (walker.nextNode()) {{
            if (walker.currentNode.textContent.trim() === {json.dumps(text)}) {{
              walker.currentNode.parentElement.scrollIntoView({{block: 'start'}});
              return true;
            }}
          }}
          return false;
        }})()"""
        if not self.evaluate(script):
            raise LocalBrowserError(f"The page shows no text {text!r} to scroll to.")

    def screenshot(self, path: Path) -> None:
        """Write the page's viewport as a PNG."""
        data = self.command("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
