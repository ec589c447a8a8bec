"""docs/configuration.md is generated from the settings model and kept current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reactq.shared.config_doc import DOC_PATH, main, render
from reactq.shared.settings import Settings


def test_the_configuration_reference_is_up_to_date() -> None:
    assert DOC_PATH.exists(), "docs/configuration.md is missing: run `make docs`"
    assert DOC_PATH.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: run `make docs`"
    )
    assert main(["--check"]) == 0


def test_every_setting_is_documented_with_its_env_var_and_meaning() -> None:
    text = render()
    envs = Settings.env_names()
    assert len(set(envs.values())) == len(envs), "two settings share an env var"
    for name, env in envs.items():
        field = Settings.model_fields[name]
        assert field.description, f"{name} has no docstring"
        row = next(line for line in text.splitlines() if line.startswith(f"| `{env}` |"))
        assert field.description.split()[0] in row


def test_secrets_are_marked_and_shown_without_defaults() -> None:
    rows = {line.split("`")[1]: line for line in render().splitlines() if line.startswith("| `")}
    for env in ("OPENAI_API_KEY", "REACTQ_API_KEYS", "REACTQ_API_KEY", "REACTQ_FLOWER_AUTH"):
        assert "*secret*" in rows[env]
    assert "`reactq`" in rows["REACTQ_NAMESPACE"]
    assert "`0`" in rows["REACTQ_METRICS_PORT"]


@pytest.mark.parametrize("module", ["reactq.shared.config_doc", "reactq.shared.errors_doc"])
def test_outside_a_checkout_it_refuses_instead_of_writing_beside_the_package(
    module: str, tmp_path: Path
) -> None:
    # As from an installed wheel: no docs/ folder in the working directory.
    run = [sys.executable, "-m", module]
    out = subprocess.run([*run, "--write"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "give --out FILE" in out.stderr
    assert list(tmp_path.iterdir()) == []
    written = subprocess.run(
        [*run, "--write", "--out", "ref.md"], cwd=tmp_path, capture_output=True, text=True
    )
    assert written.returncode == 0, written.stderr
    check = [*run, "--check", "--out", "ref.md"]
    assert subprocess.run(check, cwd=tmp_path, capture_output=True).returncode == 0
