"""Logging: JSON lines with structured fields, and secrets redacted everywhere.

The unit tests drive ``configure_logging`` directly; the end-to-end one runs a
turn through a real gateway and worker at DEBUG with secrets it chose, then
greps every line both wrote.
"""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq.shared.logs import (
    QUIET_LOGGERS,
    REDACTED,
    RedactingFilter,
    configure_logging,
    log_context,
    secrets_of,
    uvicorn_log_config,
)
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import free_port
from tests.helpers import ROOT, WorkerPool, lookup_then_answer
from tests.obs_support import start_reactq, stop, wait_http

OPENAI_SECRET = "sk-test-0penai-Secret-4242"
GATEWAY_SECRET = "gw-key-Secret-9191"


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    buffer = io.StringIO()
    settings = Settings.from_env(
        {"OPENAI_API_KEY": OPENAI_SECRET, "REACTQ_API_KEYS": GATEWAY_SECRET},
    )
    handler = configure_logging(settings, "DEBUG", fmt="json", stream=buffer)
    try:
        yield buffer, handler
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        assert [h for h in root.handlers if h not in handlers] == []


def _lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_json_lines_carry_extra_and_context_fields(captured: tuple[io.StringIO, object]) -> None:
    buffer, _ = captured
    log = logging.getLogger("reactq.test")
    with log_context(session_id="s-1"):
        log.info("turn %s finished", "t-1", extra={"status": "completed", "duration_s": 0.5})
    log.warning("no context here")
    first, second = _lines(buffer)
    assert first["message"] == "turn t-1 finished"
    assert first["level"] == "INFO" and first["logger"] == "reactq.test"
    assert first["session_id"] == "s-1" and first["status"] == "completed"
    assert first["duration_s"] == 0.5 and "ts" in first
    assert "session_id" not in second


def test_known_secrets_and_credential_shapes_are_redacted(
    captured: tuple[io.StringIO, object],
) -> None:
    buffer, _ = captured
    log = logging.getLogger("reactq.test")
    log.info("calling with key %s", OPENAI_SECRET)
    log.info("headers %r", {"Authorization": f"Bearer {GATEWAY_SECRET}"})
    log.info("other provider key sk-abcdefghijklmnop and url redis://user:hunter22@redis:6379/0")
    log.info("params api_key=whatever123 and password: p4ssw0rd!")
    try:
        raise ValueError(f"bad key {OPENAI_SECRET}")
    except ValueError:
        log.exception("failed")
    text = buffer.getvalue()
    for secret in (
        OPENAI_SECRET,
        GATEWAY_SECRET,
        "sk-abcdefghijklmnop",
        "hunter22",
        "whatever123",
        "p4ssw0rd!",
    ):
        assert secret not in text, secret
    assert text.count(REDACTED) >= 7
    assert "redis://user:[REDACTED]@redis:6379/0" in text


def test_json_lines_drop_colour_codes_and_uvicorns_color_message(
    captured: tuple[io.StringIO, object],
) -> None:
    buffer, _ = captured
    logging.getLogger("uvicorn.error").info(
        "Uvicorn running on %s",
        "http://x",
        extra={"color_message": "Uvicorn running on \x1b[1m%s\x1b[0m", "where": "\x1b[31mred"},
    )
    logging.getLogger("reactq.test").info("a \x1b[32mgreen\x1b[0m word")
    running, green = _lines(buffer)
    assert "color_message" not in running and running["where"] == "red"
    assert running["message"] == "Uvicorn running on http://x"
    assert green["message"] == "a green word"
    assert "\x1b" not in buffer.getvalue() and "\\u001b" not in buffer.getvalue()


def test_text_lines_carry_no_colour_codes() -> None:
    buffer = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    handler = configure_logging(Settings.from_env({}), "INFO", fmt="text", stream=buffer)
    try:
        logging.getLogger("reactq.test").info(
            "a \x1b[32mgreen\x1b[0m word", extra={"where": "\x1b[31mred"}
        )
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        root.handlers[:] = handlers
    line = buffer.getvalue()
    assert "a green word" in line and "where=red" in line
    assert "\x1b" not in line


def test_query_parameters_naming_keys_or_tokens_are_redacted() -> None:
    text = RedactingFilter().redact(
        "GET /v1/x?key=k1k1k1k1&API_KEY=a2a2&access_token=t3t3&sort=new&after=0-1#f"
    )
    assert text == (
        f"GET /v1/x?key={REDACTED}&API_KEY={REDACTED}&access_token={REDACTED}&sort=new&after=0-1#f"
    )


def test_a_scoped_keys_own_value_is_a_secret() -> None:
    settings = Settings.from_env({"REACTQ_API_KEYS": "acme:acme-key-123;prefix=acme-;ro"})
    assert "acme-key-123" in secrets_of(settings, environ={})


def test_secrets_of_reads_secret_settings_and_secret_named_env() -> None:
    settings = Settings.from_env({"REACTQ_FLOWER_AUTH": "ops:flowerpass1"})
    found = secrets_of(settings, {"MY_SERVICE_TOKEN": "tok-123456", "HOME": "/root"})
    assert {"flowerpass1", "ops:flowerpass1", "tok-123456"} <= found
    assert "/root" not in found
    assert RedactingFilter(found).redact("pw flowerpass1") == f"pw {REDACTED}"


def test_text_format_is_the_classic_line(tmp_path: Path) -> None:
    buffer = io.StringIO()
    handler = configure_logging(None, "INFO", fmt="text", stream=buffer)
    try:
        with log_context(session_id="s-9"):
            logging.getLogger("reactq.test").info("hello")
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    line = buffer.getvalue().strip()
    assert " INFO reactq.test: hello [session_id=s-9]" in line


def test_library_chatter_is_quiet_unless_debugging() -> None:
    """Issue 21, item 8: no line per migration step, model request or drain task at INFO;
    no password mask in a broker URL that has no password."""
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    settings = Settings.from_env({"REACTQ_REDIS_URL": "redis://localhost:6379/0"})
    chatter = ("alembic.runtime.migration", "httpx", "httpx2", "openai", "celery.app.trace")
    try:
        for verbosity, expected in (("INFO", 0), ("DEBUG", len(chatter))):
            buffer = io.StringIO()
            handler = configure_logging(settings, verbosity, fmt="text", stream=buffer)
            for name in chatter:
                logging.getLogger(name).info("chatter from %s", name)
            logging.getLogger("celery.worker.consumer.connection").info(
                "Connected to %s", "redis://:**@localhost:6379//"
            )
            logging.getLogger("reactq.worker").info("turn finished")
            lines = buffer.getvalue().splitlines()
            assert len([line for line in lines if "chatter" in line]) == expected, lines
            assert any(line.endswith("Connected to redis://localhost:6379//") for line in lines)
            assert any("turn finished" in line for line in lines)
            root.removeHandler(handler)
            handler.close()
    finally:
        root.setLevel(level)
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        assert [h for h in root.handlers if h not in before] == []


def test_uvicorn_loggers_go_through_reactqs_handler() -> None:
    from uvicorn.config import LOGGING_CONFIG  # the gateway extra

    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {
        n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names
    }
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    buffer = io.StringIO()
    # What `uvicorn module:app` does before it imports the app: handlers of its own.
    logging.config.dictConfig(LOGGING_CONFIG)
    handler = configure_logging(None, "INFO", fmt="json", stream=buffer)
    try:
        # What `reactq serve` hands uvicorn.run, which applies it after configure_logging.
        logging.config.dictConfig(uvicorn_log_config())
        # An access line the way uvicorn writes it, a query-string secret included.
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/v1/x?api_key=leak-31337", "1.1", 200
        )
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        for name, (old, propagate) in saved.items():
            logger = logging.getLogger(name)
            for extra in list(logger.handlers):
                logger.removeHandler(extra)
            for kept in old:
                logger.addHandler(kept)
            logger.propagate = propagate
        assert [h for h in root.handlers if h not in handlers] == []
    access, error = _lines(buffer)
    assert access["logger"] == "uvicorn.access"
    assert "leak-31337" not in access["message"] and "api_key=[REDACTED]" in access["message"]
    assert error["logger"] == "uvicorn.error" and error["level"] == "ERROR"
    assert "RuntimeError: boom" in error["exc"]


@pytest.mark.e2e
def test_a_full_run_at_debug_logs_no_secret(redis_url: str, namespace: str, tmp_path: Path) -> None:
    model = ScriptedServer(lookup_then_answer).start_in_thread()
    env = {
        **os.environ,
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-logs",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": OPENAI_SECRET,
        "REACTQ_API_KEYS": GATEWAY_SECRET,
        "REACTQ_API_KEY": GATEWAY_SECRET,
        "REACTQ_LOG_FORMAT": "json",
        "REACTQ_LOG_LEVEL": "DEBUG",
    }
    workers = WorkerPool(env, tmp_path)
    # Not WorkerPool.start: it pins --loglevel INFO, and this run is at DEBUG.
    workers.procs.append(
        start_reactq(
            ["worker", "--agents", "tests.pool_agents:agent", "--concurrency", "4"],
            env,
            tmp_path / "worker-0.log",
        )
    )
    port = free_port()
    gateway = start_reactq(
        ["serve", "--port", str(port), "--loglevel", "debug"], env, tmp_path / "gateway.log"
    )
    sid = f"logs-{uuid.uuid4().hex[:8]}"
    try:
        workers.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        wait_http(f"http://127.0.0.1:{port}/healthz", 60, gateway)
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "reactq.cli",
                "send",
                sid,
                "hello",
                "--agent",
                "e2e",
                "--gateway",
                f"http://127.0.0.1:{port}",
                "--json",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
    finally:
        stop(gateway)
        workers.stop()
        model.stop()
    logs = {p.name: p.read_text(errors="replace") for p in tmp_path.glob("*.log")}
    logs["send"] = sent.stdout + sent.stderr
    for name, text in logs.items():
        assert OPENAI_SECRET not in text, f"the OpenAI key reached {name}"
        assert GATEWAY_SECRET not in text, f"the gateway key reached {name}"
    records = [
        json.loads(line) for line in logs["worker-0.log"].splitlines() if line.startswith("{")
    ]
    assert any(r["level"] == "DEBUG" for r in records), "the run did not log at DEBUG"
    finished = [r for r in records if " finished: " in r["message"] and "turn " in r["message"]]
    assert finished and finished[0]["session_id"] == sid
