"""Edits of a text as ``edit_file`` makes them: an exact match, else one ignoring
whitespace (re-indented to the file's), and the unified diff the model reads.

Text work, no file I/O: ``reactq/bundles/files.py`` reads and commits the file. A miss
is a ``WorkspaceError`` the model reads.
"""

from __future__ import annotations

import difflib
from fractions import Fraction

from reactq.bundles.linematch import find_runs
from reactq.bundles.workspace import WorkspaceError

__all__ = ["DIFF_CHARS", "FUZZY_MAX_CHARS", "apply_edit", "unified_diff"]

FUZZY_MAX_CHARS = 1024 * 1024
"""Largest file ``edit_file`` matches ignoring whitespace when old_text is not found
exactly (the match is linear in the file, ``linematch``; this bounds its time too)."""
DIFF_CHARS = 20_000
"""A longer diff is cut in ``edit_file``'s answer (and says so)."""


def _norm(line: str) -> str:
    return "".join(line.split())


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, str]:
    """``text`` with ``old`` replaced by ``new``, and how it matched (for the model).

    Exact first. When the exact text is nowhere, whole lines are compared with
    whitespace collapsed (a model often gets indentation or spacing wrong) and
    the matched lines are replaced; ``new`` is then re-indented by the
    difference between the file's indentation and ``old``'s. Several matches
    are refused unless ``replace_all``.
    """
    if not old:
        raise WorkspaceError("old_text is empty: to create or overwrite a file, use write_file")
    if old == new:
        raise WorkspaceError("old_text and new_text are the same: there is nothing to change")
    if "\r\n" in text and "\r\n" not in old:
        # The model writes "\n"; a CRLF file is matched, and written back, in its own endings.
        old = old.replace("\n", "\r\n")
        new = new.replace("\r\n", "\n").replace("\n", "\r\n")
    count = text.count(old)
    if count == 1 or (count > 1 and replace_all):
        return text.replace(old, new), f"{count} exact match(es) replaced"
    if count > 1:
        lines: list[str] = []
        start = 0
        while (index := text.find(old, start)) != -1 and len(lines) < 10:
            lines.append(str(_line_of(text, index)))
            start = index + len(old)
        raise WorkspaceError(
            f"old_text matches {count} places (lines {', '.join(lines)}): include more "
            "surrounding lines to make it unique, or set replace_all to change every one"
        )
    return _fuzzy_edit(text, old, new, replace_all)


def _fuzzy_edit(text: str, old: str, new: str, replace_all: bool) -> tuple[str, str]:
    file_lines = text.splitlines(keepends=True)
    old_lines = old.splitlines()
    while old_lines and not old_lines[0].strip():
        old_lines.pop(0)
    while old_lines and not old_lines[-1].strip():
        old_lines.pop()
    not_found = WorkspaceError(
        "old_text was not found, exactly or ignoring whitespace: read the file again and "
        "copy the lines to change exactly"
    )
    if not old_lines:
        raise not_found
    if len(text) > FUZZY_MAX_CHARS:
        raise WorkspaceError(
            f"old_text was not found exactly, and the file is {len(text)} characters: matching "
            f"ignoring whitespace is only tried on files up to {FUZZY_MAX_CHARS} characters. "
            "Read the lines to change again (read_file) and copy them exactly"
        )
    want = [_norm(line) for line in old_lines]
    norms = [_norm(line) for line in file_lines]
    size = len(want)
    starts: list[int] = []
    for index in find_runs(norms, want):
        if not starts or index >= starts[-1] + size:  # leftmost, not overlapping
            starts.append(index)
    if not starts:
        raise not_found
    if len(starts) > 1 and not replace_all:
        raise WorkspaceError(
            f"old_text matches {len(starts)} places ignoring whitespace (lines "
            f"{', '.join(str(s + 1) for s in starts[:10])}): include more surrounding lines "
            "to make it unique, or set replace_all to change every one"
        )
    body = new.replace("\r\n", "\n")
    if old.replace("\r\n", "\n").endswith("\n"):
        body = body.removesuffix("\n")
    if old.replace("\r\n", "\n").startswith("\n"):
        body = body.removeprefix("\n")
    new_lines = body.split("\n") if body else []
    result = list(file_lines)
    for start in reversed(starts):
        matched = file_lines[start : start + size]
        lines = _reindent(old_lines, matched, new_lines)
        eol = "\r\n" if matched[0].endswith("\r\n") else "\n"
        replaced = [line + eol for line in lines]
        if replaced and not matched[-1].endswith("\n"):
            replaced[-1] = replaced[-1].removesuffix(eol)  # the file's last line had no newline
        result[start : start + size] = replaced
    where = ", ".join(f"{s + 1}-{s + size}" for s in starts[:10])
    return "".join(result), f"matched ignoring whitespace at line(s) {where}"


def _reindent(old_lines: list[str], matched: list[str], new_lines: list[str]) -> list[str]:
    """``new_lines`` moved to the file's indentation, when ``old_lines`` had another one.

    Each indentation of old_text maps to the file's at the same line; when that
    map is consistent and covers every indentation new_text uses, new_text is
    mapped line by line. Otherwise, when old_text's first line lacks a constant
    prefix the file has, new_text gets it. Otherwise new_text stays as written.
    """
    # The match compared line by line, blank lines included: the two lists align.
    pairs = [
        (_indent(old), _indent(actual))
        for old, actual in zip(old_lines, matched, strict=True)
        if old.strip()
    ]
    if all(old == actual for old, actual in pairs):
        return new_lines  # old_text's indentation was right
    scaled = _scale_spaces(pairs, new_lines)
    if scaled is not None:
        return scaled
    mapping: dict[str, str] = {}
    consistent = all(mapping.setdefault(old, actual) == actual for old, actual in pairs)
    if consistent and all(_indent(line) in mapping for line in new_lines if line.strip()):
        return [
            mapping[_indent(line)] + line.lstrip() if line.strip() else line for line in new_lines
        ]
    first_old, first_file = pairs[0]
    if first_file.endswith(first_old) and all(
        line.startswith(first_old) for line in new_lines if line.strip()
    ):
        extra = first_file[: len(first_file) - len(first_old)]
        return [extra + line if line.strip() else line for line in new_lines]
    return new_lines


def _scale_spaces(pairs: list[tuple[str, str]], new_lines: list[str]) -> list[str] | None:
    """new_lines re-indented by the linear map (file = a * old + b columns) that takes
    old_text's space indentation to the file's, when one map fits every line."""
    if not all(old.strip(" ") == "" and actual.strip(" ") == "" for old, actual in pairs):
        return None  # tabs: no column arithmetic
    widths = sorted({(len(old), len(actual)) for old, actual in pairs})
    olds = sorted({w[0] for w in widths})
    if len(olds) != len(widths):
        return None  # one old width maps to two file widths
    if len(olds) == 1:
        scale = Fraction(1)
    else:
        (o1, f1), (o2, f2) = widths[0], widths[-1]
        scale = Fraction(f2 - f1, o2 - o1)
    offset = widths[0][1] - scale * widths[0][0]
    if scale <= 0 or any(scale * o + offset != f for o, f in widths):
        return None
    out = []
    for line in new_lines:
        if not line.strip():
            out.append(line)
            continue
        indent = _indent(line)
        if indent.strip(" "):
            return None
        width = scale * len(indent) + offset
        if width < 0 or width.denominator != 1:
            return None
        out.append(" " * int(width) + line.lstrip())
    return out


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file (``a/path`` -> ``b/path``), cut when very long."""
    diff = "\n".join(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            f"a/{path}",
            f"b/{path}",
            lineterm="",
        )
    )
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + f"\n[... diff cut at {DIFF_CHARS} characters]"
    return diff
