"""Housekeeping of issue 21, item 11: CI installs, benchmark keys, the gateway page.

(Flower's namespace is in test_flower.py, compose-local's cleanup in
test_compose.py, the build's warnings in test_packaging.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import redis as redis_sync

from tests.helpers import ROOT

STATIC = ROOT / "producer" / "static"


def test_ci_installs_no_recommended_packages() -> None:
    script = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    installs = [line for line in script.splitlines() if "apt-get install" in line]
    assert installs, "the CI script installs Chromium with apt-get"
    for line in installs:
        assert "--no-install-recommends" in line, line


def test_benchmark_results_stay_in_the_run_namespace(redis_url: str, namespace: str) -> None:
    """bench/noop_app.py's result backend writes under the run's namespace, which the
    benchmark deletes afterwards (a result key outside it would outlive the run)."""
    bench_ns = f"{namespace}-bench"
    task_id = uuid.uuid4().hex
    code = (
        "from bench.noop_app import app\n"
        f"app.backend.store_result({task_id!r}, 42, 'SUCCESS')\n"
        f"assert app.backend.get_task_meta({task_id!r})['result'] == 42\n"
    )
    env = {"PATH": "/usr/bin:/bin", "REACTQ_REDIS_URL": redis_url, "REACTQ_NAMESPACE": bench_ns}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=f"*{task_id}*", count=1000))
        assert keys and all(k.startswith(bench_ns) for k in keys), keys
        client.delete(*keys)
    finally:
        client.close()


def test_the_gateway_page_has_a_favicon_and_keeps_the_key_for_the_tab_only() -> None:
    page = (STATIC / "index.html").read_text()
    icon = re.search(r'<link rel="icon"[^>]* href="/static/([^"]+)"', page)
    assert icon and (STATIC / icon.group(1)).is_file(), "no favicon linked from the page"
    script = (STATIC / "app.js").read_text()
    # An API key in localStorage outlives the tab, on disk, for any script of the origin;
    # sessionStorage ends with the tab. (test_browser.py checks it in a real browser.)
    assert "apikey: sessionStorage" in script
    assert 'localStorage.removeItem("reactq.apikey")' in script
