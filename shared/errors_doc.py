"""Render ``docs/errors.md`` from the error registry (``reactq.shared.error_codes``).

A test compares the file with ``render()``, so the reference cannot drift from
the registry. Regenerate with ``make docs`` or ``python -m reactq.shared.errors_doc
--write`` from the repository's root (``--out FILE`` writes it elsewhere; as
``config_doc``, it never writes beside the installed package); ``reactq errors``
prints the same registry.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reactq.shared.config_doc import doc_command
from reactq.shared.error_codes import ERROR_CODES, KINDS

__all__ = ["DOC_PATH", "render"]

DOC_PATH = Path("docs") / "errors.md"
"""Where the reference lives, relative to the working directory (a checkout's root)."""

HEADER = """\
# Error codes

<!-- Generated from shared/error_codes.py by `make docs`; do not edit by hand. -->

Every error reactq reports carries a stable `code`: on an exception
(`ReactqError.code`), an `error` event, a turn's `final` (`code`, when it did not
complete), a `tool_failed` event (the model reads `[code] error`), a gateway
error body, and a CLI error line (`[code]`). *Retryable* says whether the same
request may succeed if made again later, unchanged (`ReactqError.retryable`
reads it; the model client retries exactly the retryable model codes).
`reactq errors` prints this list (`--json`: one object per line).
"""


def render() -> str:
    """The whole reference, as markdown."""
    parts = [HEADER]
    for kind, where in KINDS.items():
        parts.append(f"\n## {kind}: {where}\n\n| code | retryable | meaning |\n|---|---|---|\n")
        parts.extend(
            f"| `{e.code}` | {'yes' if e.retryable else 'no'} | {e.meaning} |\n"
            for e in ERROR_CODES
            if e.kind == kind
        )
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``--write`` the reference to docs/errors.md (of the working directory, or
    ``--out``), ``--check`` it, else print it."""
    return doc_command(
        argv, prog="python -m reactq.shared.errors_doc", path=DOC_PATH, text=render()
    )


if __name__ == "__main__":
    sys.exit(main())
