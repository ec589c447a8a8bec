"""Glob patterns over workspace paths: ``*``, ``?``, ``[...]``, ``**`` and ``{a,b}``.

Matched component by component (``fnmatch`` for one component, a memoised walk
for ``**``), never as one big regular expression: a pattern like
``*a*a*a*a*a*b`` against a long name backtracks exponentially in a naive
translation, and the model chooses the pattern.
"""

from __future__ import annotations

import fnmatch
import re
from functools import cache

from reactq.bundles.workspace import WorkspaceError

__all__ = ["GlobPattern"]

MAX_PATTERN_CHARS = 500
MAX_ALTERNATIVES = 64
_BRACES = re.compile(r"\{([^{}]*)\}")


class GlobPattern:
    """A glob over ``/``-separated relative paths.

    ``*`` and ``?`` stay inside one component, ``**`` as a whole component
    spans any number of them (none included), ``{a,b}`` is either. With
    ``basename_if_plain``, a pattern without ``/`` matches a file's name at any
    depth (``*.py``, as ripgrep's ``--glob`` does).
    """

    def __init__(self, pattern: str, *, basename_if_plain: bool = False) -> None:
        if not pattern or len(pattern) > MAX_PATTERN_CHARS:
            raise WorkspaceError(f"the glob must have 1 to {MAX_PATTERN_CHARS} characters")
        if "\\" in pattern or "\0" in pattern:
            raise WorkspaceError("the glob may not contain backslashes or NUL")
        if pattern.startswith("/"):
            raise WorkspaceError("the glob is relative to the folder searched: drop the leading /")
        self.pattern = pattern
        self.basename_only = basename_if_plain and "/" not in pattern
        self._alternatives = [
            tuple(p for p in alt.split("/") if p not in ("", "."))
            for alt in _expand_braces(pattern)
        ]
        for alt in self._alternatives:
            if ".." in alt:
                raise WorkspaceError("the glob may not contain '..'")

    def __repr__(self) -> str:
        return f"GlobPattern({self.pattern!r})"

    def matches(self, path: str) -> bool:
        """Whether ``path`` (relative, ``/``-separated) matches."""
        parts = tuple(path.split("/"))
        if self.basename_only:
            parts = parts[-1:]
        return any(_match(alt, parts) for alt in self._alternatives)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (innermost first, so nesting works)."""
    done: list[str] = []
    todo = [pattern]
    while todo:
        item = todo.pop()
        found = _BRACES.search(item)
        if found is None:
            done.append(item)
        else:
            head, tail = item[: found.start()], item[found.end() :]
            todo.extend(head + choice + tail for choice in found.group(1).split(","))
        if len(done) + len(todo) > MAX_ALTERNATIVES:
            raise WorkspaceError(f"the glob expands to more than {MAX_ALTERNATIVES} patterns")
    return sorted(set(done))


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    @cache
    def at(pi: int, si: int) -> bool:
        if pi == len(pattern):
            return si == len(parts)
        if pattern[pi] == "**":
            return at(pi + 1, si) or (si < len(parts) and at(pi, si + 1))
        return (
            si < len(parts) and fnmatch.fnmatchcase(parts[si], pattern[pi]) and at(pi + 1, si + 1)
        )

    return at(0, 0)
