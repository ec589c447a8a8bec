"""SKILL.md frontmatter: a strict YAML subset, read without a YAML dependency.

The subset is what skill files written for any runtime use: top-level
``key: value`` lines whose value is a plain scalar, a single- or double-quoted
one-line scalar, or a ``|`` / ``>`` block scalar (with an optional ``-`` / ``+``
chomping indicator). Blank lines and whole-line ``#`` comments are allowed.
Anything else (nested mappings, lists, flow collections, anchors, tags,
multi-line quoted scalars, duplicate keys) raises ``SkillError`` naming the file
and the line, instead of being guessed at. Every value is a string.
"""

from __future__ import annotations

import re

from reactq.shared.errors import SkillError

__all__ = ["parse_frontmatter", "split_frontmatter"]

_KEY_RE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*):(?:[ \t]+(.*))?$")
_BLOCK_RE = re.compile(r"^([|>])([+-]?)$")
# Characters that start something other than a plain scalar in YAML.
_PLAIN_FORBIDDEN_START = set("[]{},&*!%@`")
_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
    "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
    "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def split_frontmatter(text: str, source: str) -> tuple[dict[str, str], str, int]:
    """(frontmatter, body, body's first line number) of a SKILL.md text.

    ``source`` names the file in errors. The text must open with a ``---`` line
    and the frontmatter end with another.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise SkillError(
            f"{source}, line 1: a SKILL.md must open with a '---' line and YAML frontmatter",
            file=source,
            line=1,
        )
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            front = parse_frontmatter(lines[1:index], source, first_line=2)
            return front, "\n".join(lines[index + 1 :]), index + 2
    raise SkillError(
        f"{source}, line 1: the frontmatter is never closed by a '---' line",
        file=source,
        line=1,
    )


def parse_frontmatter(lines: list[str], source: str, *, first_line: int = 1) -> dict[str, str]:
    """The ``key: value`` pairs of frontmatter ``lines`` (numbered from ``first_line``)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        number = first_line + i

        def fail(why: str, at: int = number) -> SkillError:
            return SkillError(f"{source}, line {at}: {why}", file=source, line=at)

        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        if line[0] in " \t":
            raise fail("unexpected indentation: nested mappings and lists are not supported")
        match = _KEY_RE.match(line.rstrip())
        if match is None:
            raise fail("expected 'key: value' (a top-level key, a colon, then the value)")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in out:
            raise fail(f"duplicate key {key!r}")
        block = _BLOCK_RE.match(_strip_comment(raw)) if raw else None
        if block is not None:
            value, used = _block_scalar(lines, i + 1, block.group(1), block.group(2))
            out[key] = value
            i += 1 + used
            continue
        try:
            out[key] = _scalar(raw)
        except ValueError as exc:
            raise fail(f"{key}: {exc}") from None
        i += 1
    return out


def _scalar(raw: str) -> str:
    """One line's value: plain, 'single' or "double" quoted."""
    if not raw:
        raise ValueError(
            "an empty value (or a nested mapping or list below it) is not supported; "
            "write the value on the same line, quoted if need be"
        )
    if raw[0] == "'":
        return _single_quoted(raw)
    if raw[0] == '"':
        return _double_quoted(raw)
    return _plain(raw)


def _plain(raw: str) -> str:
    value = _strip_comment(raw).rstrip()
    if value[0] in _PLAIN_FORBIDDEN_START or value[0] in "|>":
        raise ValueError(
            f"a value starting with {value[0]!r} is YAML syntax outside the supported subset; "
            "quote the value"
        )
    if value.startswith(("- ", "? ")) or value in ("-", "?"):
        raise ValueError("lists and complex keys are not supported; quote the value")
    if ": " in value or value.endswith(":"):
        raise ValueError("a plain value may not contain ': '; quote the value")
    return value


def _strip_comment(raw: str) -> str:
    """A plain value without its trailing `` # comment`` (YAML: a space before ``#``)."""
    match = re.search(r"[ \t]#", raw)
    return raw[: match.start()] if match else raw


def _after_quote(rest: str) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise ValueError("unexpected text after the closing quote")


def _single_quoted(raw: str) -> str:
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "'":
            if raw[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            _after_quote(raw[i + 1 :])
            return "".join(out)
        out.append(ch)
        i += 1
    raise ValueError("the single-quoted value is not closed on its line")


def _double_quoted(raw: str) -> str:
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == '"':
            _after_quote(raw[i + 1 :])
            return "".join(out)
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = raw[i + 1 : i + 2]
        if esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        elif esc in _HEX_ESCAPES:
            width = _HEX_ESCAPES[esc]
            digits = raw[i + 2 : i + 2 + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"invalid escape \\{esc}{digits}")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        else:
            raise ValueError(f"invalid escape \\{esc}" if esc else "a lone backslash at the end")
    raise ValueError("the double-quoted value is not closed on its line")


def _block_scalar(lines: list[str], start: int, style: str, chomp: str) -> tuple[str, int]:
    """A ``|`` or ``>`` block from ``lines[start:]``: (value, lines used)."""
    body: list[str] = []
    indent: int | None = None
    used = 0
    for line in lines[start:]:
        if line.strip():
            width = len(line) - len(line.lstrip(" "))
            if width == 0:
                break  # the next top-level key
            if indent is None:
                indent = width
            elif width < indent:
                break  # dedented below the block: left for the caller to refuse
            body.append(line[indent:])
        else:
            body.append("")
        used += 1
    # Trailing blank lines belong to the block only for chomping; keep them to count.
    content = body
    while content and not content[-1]:
        content = content[:-1]
    trailing = len(body) - len(content)
    if style == "|":
        text = "\n".join(content)
    else:
        text = _fold(content)
    if not content:
        return "", used
    if chomp == "-":
        return text, used
    if chomp == "+":
        return text + "\n" * (trailing + 1), used
    return text + "\n", used


def _fold(lines: list[str]) -> str:
    """YAML folding: lines join with a space, a blank line is a newline, indented lines stay."""
    out = ""
    previous: str | None = None
    for line in lines:
        more_indented = line.startswith((" ", "\t"))
        if previous is None:
            out = line
        elif not line:
            out += "\n"
        elif more_indented or previous.startswith((" ", "\t")) or not previous:
            out += ("\n" if previous else "") + line
        else:
            out += " " + line
        previous = line
    return out
