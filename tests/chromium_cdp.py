"""Headless Chromium driven over its DevTools protocol (a tornado websocket): open a page,
wait in real time (Bokeh pages fill in over their own websocket), evaluate JavaScript,
take a screenshot.  Used by the dashboard's browser test."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any


async def _session(binary: str, url: str, wait: float, expression: str,
                   screenshot: Path | None, window: tuple[int, int]) -> Any:
    from tornado.websocket import websocket_connect

    profile = tempfile.mkdtemp(prefix="mgpu-chromium-")
    # Its own process group: the browser's helper processes go with it.
    proc = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu",
                             "--hide-scrollbars", "--remote-debugging-port=0",
                             f"--user-data-dir={profile}", "--window-size={},{}".format(*window),
                             "about:blank"], stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        for line in proc.stderr:
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                break
        else:
            raise RuntimeError("chromium did not open its DevTools port")
        new = urllib.request.Request(f"http://127.0.0.1:{found.group(1)}/json/new?{url}",
                                     method="PUT")
        target = json.loads(urllib.request.urlopen(new, timeout=30).read())
        conn = await websocket_connect(target["webSocketDebuggerUrl"],
                                       max_message_size=64 << 20)
        counter = iter(range(1, 1 << 30))

        async def call(method: str, **params: Any) -> dict:
            mid = next(counter)
            await conn.write_message(json.dumps({"id": mid, "method": method,
                                                 "params": params}))
            while True:
                msg = json.loads(await conn.read_message())
                if msg.get("id") == mid:
                    return msg.get("result", msg)

        await asyncio.sleep(wait)
        value = (await call("Runtime.evaluate", expression=expression,
                            returnByValue=True))["result"].get("value")
        if screenshot is not None:
            shot = await call("Page.captureScreenshot", format="png")
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        conn.close()
        return value
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def evaluate(binary: str, url: str, expression: str, *, wait: float = 6.0,
             screenshot: Path | None = None, window: tuple[int, int] = (1600, 1000)) -> Any:
    """Open ``url`` in a ``window`` (width, height), wait ``wait`` seconds, return
    ``expression``'s value (JSON-able)."""
    return asyncio.run(asyncio.wait_for(
        _session(binary, url, wait, expression, screenshot, window), timeout=wait + 60))


BOKEH_COLUMN_VALUES = """(() => {
  const out = new Set();
  for (const doc of (window.Bokeh ? Bokeh.documents : []))
    for (const model of doc.all_models) {
      const data = model.data;
      if (data && data.name) for (const v of data.name) out.add(String(v));
    }
  return JSON.stringify([...out]);
})()"""
"""Every value of a ``name`` column in the page's Bokeh data sources (task prefixes)."""
