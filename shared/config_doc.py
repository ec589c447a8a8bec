"""Render ``docs/configuration.md`` from the settings model.

Each setting's meaning is its field's docstring (the model reads them with
``use_attribute_docstrings``), so the reference cannot drift from the code: a
test compares the file with ``render()``. Regenerate with ``make docs`` or
``python -m reactq.shared.config_doc --write`` from the repository's root (the file
is found from the working directory, never beside the installed package: from a
wheel that would be site-packages); ``--out FILE`` writes it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from reactq.shared.settings import _LIST_FIELDS, Settings

__all__ = ["DOC_PATH", "doc_command", "render"]

DOC_PATH = Path("docs") / "configuration.md"
"""Where the reference lives, relative to the working directory (a checkout's root)."""

HEADER = """\
# Configuration reference

<!-- Generated from shared/settings.py by `make docs`; do not edit by hand. -->

Every reactq process (worker, gateway, producer, Flower) reads its settings
from environment variables when it starts, and refuses to start when one is
invalid, naming the variable. An empty variable counts as unset. List settings
take comma-separated values. Secrets (marked *secret*) never reach a log line
or an event.

| variable | default | meaning |
|---|---|---|
"""

FOOTER = """
Command-line flags win over the environment where both exist (`reactq worker
--concurrency`, `--loglevel`). Flower also honours its own `FLOWER_*`
variables; the OpenTelemetry SDK its `OTEL_*` ones beyond those above (headers,
timeouts, resource attributes).
"""


def _default(name: str) -> str:
    field = Settings.model_fields[name]
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "doc_default" in extra:  # a default that depends on the machine (a user's folder)
        return f"`{extra['doc_default']}`"
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None or value == []:
        return ""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, list):
        return f"`{','.join(map(str, value))}`"
    if isinstance(value, str | int | float):
        return f"`{value}`"
    return f"`{json.dumps(value, default=str)}`"


def _meaning(name: str) -> str:
    field = Settings.model_fields[name]
    text = " ".join((field.description or "").split())
    if not text:
        raise ValueError(f"setting {name!r} has no docstring: add one line under the field")
    if field.annotation is not None and SecretStr in getattr(field.annotation, "__args__", ()):
        text += " *secret*"
    if name in _LIST_FIELDS:
        text += " (list)"
    return text.replace("|", "\\|")


def render() -> str:
    """The whole reference, as markdown."""
    rows = [
        f"| `{env}` | {_default(name)} | {_meaning(name)} |"
        for name, env in Settings.env_names().items()
    ]
    return HEADER + "\n".join(rows) + "\n" + FOOTER


def doc_command(argv: list[str] | None, *, prog: str, path: Path, text: str) -> int:
    """A generated reference's command: ``--write`` ``text`` to ``path`` (or ``--out``),
    ``--check`` that the file holds it (1 when stale), else print it.

    ``path`` is relative to the working directory; a folder that is not there is
    refused in one line (exit 2), not created: run from an installed wheel, outside a
    checkout, there is no docs/ folder to write into.
    """
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--write", action="store_true", help=f"write it to {path}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help=f"this file instead of {path} (of the cwd)"
    )
    args = parser.parse_args(argv)
    target: Path = args.out or path
    if (args.write or args.check) and not target.parent.resolve().is_dir():
        print(
            f"{prog}: error: no folder {target.parent.resolve()}: run it from a reactq "
            f"checkout's root (it writes {path}), or give --out FILE",
            file=sys.stderr,
        )
        return 2
    if args.write:
        target.write_text(text, encoding="utf-8")
    elif args.check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(f"{target} is out of date: run `make docs`", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``--write`` the reference to docs/configuration.md (of the working directory, or
    ``--out``), ``--check`` it, else print it."""
    return doc_command(
        argv, prog="python -m reactq.shared.config_doc", path=DOC_PATH, text=render()
    )


if __name__ == "__main__":
    sys.exit(main())
