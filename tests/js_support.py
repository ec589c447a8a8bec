"""Node for the tests that drive a protocol's own JavaScript client (LangGraph's, A2A's,
AG-UI's): one npm install per test session into a shared folder, each script run
from it with ``node``. Without npm or node the test is unavailable (a skip that says
so, a failure under REACTQ_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import unavailable

JS = Path(__file__).parent / "js"
"""The scripts: ``tests/js/*.mjs``."""

_installed: set[str] = set()


def _where() -> Path:
    # Inside the suite's own data directory (conftest.py), removed when the session ends.
    where = Path(os.environ["XDG_DATA_HOME"]) / "node"
    where.mkdir(exist_ok=True)
    return where


def node_with(*packages: str) -> tuple[str, Path]:
    """``node`` and a folder whose ``node_modules`` holds ``packages`` (installed once
    per test session), or the test is unavailable."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        unavailable("npm and node are needed for the JavaScript clients' tests (Node >= 18)")
        raise AssertionError("unreachable")
    where = _where()
    missing = [p for p in packages if p not in _installed]
    if missing:
        install = subprocess.run(
            [npm, "install", "--silent", "--no-audit", "--no-fund", *missing],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if install.returncode != 0:
            unavailable(f"npm could not install {' '.join(missing)}: {install.stderr[-500:]}")
        _installed.update(missing)
    return node, where


def run_script(name: str, *args: str, packages: tuple[str, ...], timeout: float = 120) -> Any:
    """Run ``tests/js/NAME`` with ``args`` beside ``packages``; its last line of output,
    parsed as JSON (the script's report). A script that exits non-zero fails the test
    with its stderr."""
    node, where = node_with(*packages)
    script = where / name
    shutil.copy(JS / name, script)
    ran = subprocess.run(
        [node, str(script), *args], cwd=where, capture_output=True, text=True, timeout=timeout
    )
    assert ran.returncode == 0, f"{name} failed:\n{ran.stderr[-3000:]}\n{ran.stdout[-2000:]}"
    return json.loads(ran.stdout.strip().splitlines()[-1])
