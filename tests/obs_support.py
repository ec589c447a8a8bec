"""Helpers of the observability tests: plain HTTP on 127.0.0.1, processes, a model."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.helpers import ROOT


def http_get(
    url: str, *, auth: tuple[str, str] | None = None, timeout: float = 5
) -> tuple[int, str]:
    """GET ``url``: (status, body); connection errors are status 0."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        exc.close()
        return int(exc.code), body
    except (urllib.error.URLError, OSError):
        return 0, ""


def http_json(url: str, **kwargs: Any) -> Any:
    """GET and decode JSON, or None when the answer is not a 200."""
    status, body = http_get(url, **kwargs)
    return json.loads(body) if status == 200 else None


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``url`` answers at all (any HTTP status); fail if ``proc`` dies."""
    deadline = time.monotonic() + timeout
    while http_get(url, timeout=1)[0] == 0:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process serving {url} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer within {timeout}s")
        time.sleep(0.1)


def start_reactq(args: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``reactq ARGS`` (as ``python -m producer.cli``) logging to ``log``."""
    out = open(log, "wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "reactq.cli", *args],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        out.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
