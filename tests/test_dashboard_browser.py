"""The dashboard and the performance report in a real browser (headless Chromium).

While a CPU run joined to a `cluster` is in progress, Chromium renders the
status page (its JavaScript must come from the dashboard itself, so that it
works without internet) and our task names must be in its Bokeh documents,
and in the dashboard's /metrics route; afterwards it opens the run's
--report file, which must be self-contained, and finds them there too.
Skipped where no chromium is installed (.ci/run installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from chromium_cdp import BOKEH_COLUMN_VALUES, evaluate
from conftest import REPO_ROOT, RunningCommand

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/run installs it)")
OUR_TASKS = ("knn-train", "mgpu-shard", "knn-predict")


def _chromium(*args: str) -> str:
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], capture_output=True, text=True,
                          timeout=120)
    return done.stdout


def test_status_page_metrics_and_report_show_our_tasks(tmp_path):
    cluster = RunningCommand("--workers", "2")
    dashboard = cluster.lines["dashboard"]
    report = tmp_path / "report.html"
    run = subprocess.Popen(
        [sys.executable, "-m", "mgpu_dask.run", "knn", "--dataset", "digits",
         "--scheduler-address", cluster.lines["scheduler"], "--repeats", "40", "--quiet",
         "--report", str(report)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        # predictions as tasks, which the dashboard draws (straight ones it does not see)
        env={**os.environ, "DASK_MGPU_DASK__CLUSTER__STRAIGHT_PREDICTIONS": "false"})
    try:
        time.sleep(4)  # the run is placing shards and predicting
        status = _chromium("--dump-dom", dashboard)
        shot = tmp_path / "status.png"
        rendered = json.loads(evaluate(CHROMIUM, dashboard, BOKEH_COLUMN_VALUES, screenshot=shot))
        metrics = _chromium("--dump-dom", dashboard.replace("/status", "/metrics"))
        assert run.wait(timeout=240) == 0
    finally:
        run.kill()
        rc, _, err = cluster.interrupt()
    assert rc == 0
    for name in OUR_TASKS:
        assert f'task_prefix_name="{name}"' in metrics
    assert 'src="static/js/bokeh.min.js' in status and "cdn.bokeh.org" not in status
    assert set(OUR_TASKS) <= set(rendered)  # the progress bars and task stream, as drawn
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 30_000
    # Bokeh draws the report from a script after the page loads: a virtual time budget
    # lets that finish before the dump on a slow machine (CI's failed once without it)
    page = _chromium("--virtual-time-budget=20000", "--dump-dom", report.as_uri())
    assert "cdn.bokeh.org" not in report.read_text()  # self-contained: opens offline
    for name in OUR_TASKS:
        assert name in page
