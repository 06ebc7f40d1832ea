"""The dashboard's pages of a GPU run, captured where no browser is, drawn where one is.

The GPU machine has no browser and cannot be reached from outside, so the
pages are taken the way a browser takes them -- over the dashboard's Bokeh
websocket (``bokeh.client.pull_session``, the same document the browser
would draw, data included) -- while a run joined to a ``cluster`` is
working, and saved as self-contained HTML (Bokeh's JavaScript inline) next
to a JSON of the machine and command.  Here, headless Chromium opens each
saved page (no network needed) and takes its screenshot.

    # on the GPU machine
    python benchmarks/dashboard_panels.py capture --out DIR --workers 2
    # here
    python benchmarks/dashboard_panels.py render DIR/individual-gpu-memory.html \
        DIR/individual-gpu-utilization.html --sizes 1200x420,1200x230 --png docs/dashboard-gpu.png
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = ("gpu", "status")  # GPU utilisation and memory per GPU; task stream and progress


def _start_cluster(workers: int, device: str) -> tuple[subprocess.Popen, dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "mgpu_dask.run", "cluster", "--workers",
                             str(workers), "--device", device, "--dashboard-address", ":0"],
                            cwd=REPO,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    lines: dict[str, str] = {}
    deadline = time.time() + 180
    while "join it" not in lines and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        key, _, value = line.partition(":")
        lines[key.strip()] = value.strip()
    if "join it" not in lines:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit("the cluster did not start")
    return proc, lines


def _pull(url: str, title: str) -> str:
    """The page's Bokeh document as a self-contained HTML file (Bokeh's JavaScript inline)."""
    from bokeh.client import pull_session
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    with pull_session(url=url) as session:
        return file_html(session.document, INLINE, title=title)


def capture(out: Path, workers: int, device: str, pages: list[str], job: list[str],
            wait: float) -> None:
    from mgpu_dask.jobs import machine

    out.mkdir(parents=True, exist_ok=True)
    cluster, lines = _start_cluster(workers, device)
    status = lines["dashboard"]
    base = status.rsplit("/", 1)[0]
    command = [sys.executable, "-m", "mgpu_dask.run", *job, "--scheduler-address",
               lines["scheduler"]]
    run = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        time.sleep(wait)  # the run has placed its shards and is computing
        import bokeh

        for page in pages:
            html = _pull(f"{base}/{page}", f"Dask dashboard /{page}")
            (out / f"{page}.html").write_text(html)
            (out / f"{page}.json").write_text(json.dumps({
                "page": f"/{page}", "machine": machine(), "bokeh": bokeh.__version__,
                "captured after seconds": wait,
                "command": "python benchmarks/dashboard_panels.py capture " + " ".join(
                    sys.argv[2:]),
                "run": "python -m mgpu_dask.run " + " ".join(job)}, indent=1))
            print(f"{page}: {len(html)} bytes of HTML", flush=True)
        print("run exit", run.wait(timeout=600), flush=True)
    finally:
        run.kill()
        os.killpg(cluster.pid, signal.SIGINT)
        cluster.wait(timeout=60)


def render(saved: list[Path], png: Path, sizes: list[tuple[int, int]]) -> None:
    """Screenshot each saved page (its own window size) and stack them into ``png``."""
    import shutil
    import tempfile

    from PIL import Image

    sys.path.insert(0, str(REPO / "tests"))
    from chromium_cdp import evaluate

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("no chromium here (apt install chromium)")
    shots = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (page, size) in enumerate(zip(saved, sizes)):
            shot = Path(tmp) / f"{i}.png"
            drawn = evaluate(binary, page.resolve().as_uri(), "Bokeh.documents.length",
                             wait=4.0, screenshot=shot, window=size)
            print(f"{page}: {drawn} Bokeh document(s) drawn")
            shots.append(Image.open(shot).convert("RGB"))
    out = Image.new("RGB", (max(s.width for s in shots), sum(s.height for s in shots)), "white")
    y = 0
    for shot in shots:
        out.paste(shot, (0, y))
        y += shot.height
    out.save(png, optimize=True)
    print(f"wrote {png}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--workers", type=int, default=2)
    c.add_argument("--wait", type=float, default=8.0)
    c.add_argument("--device", default="auto")
    c.add_argument("--pages", default=",".join(PAGES))
    c.add_argument("--job", default="knn --fraction 4 --repeats 40 --quiet")
    r = sub.add_parser("render")
    r.add_argument("saved", type=Path, nargs="+", help="saved pages, stacked top to bottom")
    r.add_argument("--png", type=Path, required=True)
    r.add_argument("--sizes", default="1200x600",
                   help="comma list of WIDTHxHEIGHT, one per page (the last repeats)")
    args = p.parse_args()
    if args.what == "capture":
        capture(args.out, args.workers, args.device, args.pages.split(","), args.job.split(),
                args.wait)
    else:
        sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
        sizes += [sizes[-1]] * (len(args.saved) - len(sizes))
        render(args.saved, args.png, sizes)


if __name__ == "__main__":
    main()
