"""``Settings`` is the only reader of the environment: the rule on the source, and
the helpers that hand the environment on to child processes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

import reactq
from reactq.shared.settings import Settings
from reactq.shared.tracing import otlp_traces_endpoint

PACKAGE = Path(reactq.__file__).parent
SETTINGS = (PACKAGE / "shared" / "settings.py").resolve()

# Reading or writing the process environment, however spelled.
ENV_ACCESS = re.compile(
    r"\bos\.(environb?|getenvb?|putenv|unsetenv)\b"
    r"|\bfrom\s+os\s+import\s+[^\n]*\b(environb?|getenvb?|putenv|unsetenv)\b"
)


def _sources() -> list[Path]:
    # os.walk follows the links: reactq/worker, reactq/producer and reactq/shared
    # are symlinks to the repository's top-level folders.
    return sorted(
        Path(root, name).resolve()
        for root, _, files in os.walk(PACKAGE, followlinks=True)
        for name in files
        if name.endswith(".py")
    )


def test_no_module_but_settings_touches_the_environment() -> None:
    sources = _sources()
    assert SETTINGS in sources and len(sources) > 90
    offenders = [
        f"{path.relative_to(PACKAGE.parent.resolve())}:{number}: {line.strip()}"
        for path in sources
        if path != SETTINGS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ENV_ACCESS.search(line)
    ]
    assert offenders == [], "read the environment through Settings:\n" + "\n".join(offenders)


def test_the_rule_catches_every_spelling() -> None:
    for line in (
        'os.environ["X"] = "1"',
        'os.getenv("X")',
        'os.putenv("X", "1")',
        "from os import getenv, path",
    ):
        assert ENV_ACCESS.search(line), line
    assert not ENV_ACCESS.search("Settings.process_env()")


def test_child_env_gives_a_child_these_settings_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACTQ_NAMESPACE", "parent")
    monkeypatch.setenv("REACTQ_MODEL", "dropped")
    monkeypatch.setenv("UNRELATED_VARIABLE", "kept")
    settings = Settings.from_env().model_copy(
        update={
            "namespace": "child",
            "model": None,
            "openai_base_url": "http://127.0.0.1:9/v1",
            "openai_api_key": SecretStr("sk-offline"),
            "api_keys": [SecretStr("k1-abcdef"), SecretStr("k2-abcdef")],
            "tracing": True,
            "lease_ttl_seconds": 12.5,
        }
    )
    env = settings.child_env(PYTHONUNBUFFERED="1")
    assert env["UNRELATED_VARIABLE"] == "kept" and env["PYTHONUNBUFFERED"] == "1"
    assert "REACTQ_MODEL" not in env  # changed to None here: unset there
    child = Settings.from_env(env)
    for name in ("namespace", "model", "openai_base_url", "tracing", "lease_ttl_seconds"):
        assert getattr(child, name) == getattr(settings, name), name
    assert child.openai_api_key is not None
    assert child.openai_api_key.get_secret_value() == "sk-offline"
    assert [k.get_secret_value() for k in child.api_keys] == ["k1-abcdef", "k2-abcdef"]


def test_process_env_selects_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACTQ_TEST_SELECTED", "yes")
    monkeypatch.setenv("REACTQ_TEST_OTHER", "no")
    picked = Settings.process_env(lambda name: name == "REACTQ_TEST_SELECTED")
    assert picked == {"REACTQ_TEST_SELECTED": "yes"}
    assert Settings.process_env()["REACTQ_TEST_OTHER"] == "no"


def test_the_otel_variables_are_settings() -> None:
    settings = Settings.from_env(
        {
            "OTEL_SERVICE_NAME": "svc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_TRACES_EXPORTER": "console",
        }
    )
    assert settings.otel_service_name == "svc"
    assert settings.otel_exporter_otlp_endpoint == "http://collector:4318"
    assert settings.otel_traces_exporter == "console"


def test_the_otlp_traces_url_follows_the_spec() -> None:
    def url(**env: str) -> str | None:
        return otlp_traces_endpoint(Settings.from_env(env))

    assert url() is None
    assert url(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318") == "http://c:4318/v1/traces"
    assert url(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318/") == "http://c:4318/v1/traces"
    traces = "http://t:4318/custom"
    assert url(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://c", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces
    ) == (traces)
