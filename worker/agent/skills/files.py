"""Reading a file the model named, confined to one skill's directory.

The model chooses ``file``, so it is untrusted input. Two layers keep it inside
the skill directory:

1. ``check_relative`` refuses absolute paths, ``..``, hidden names (a part that
   starts with ``.``), backslashes and NUL bytes; ``resolve_inside`` then
   resolves symlinks and refuses a path that leads out of the directory.
2. ``read_confined`` opens the (resolved) relative path by walking from the
   skill directory one part at a time with ``O_NOFOLLOW`` (POSIX), so a symlink
   swapped in after the check is refused too, and reads only a regular file with
   a single link (a hard link could name a file outside) up to
   ``MAX_FILE_BYTES`` of UTF-8 text.

Refusals are ``SkillError`` whose message holds no path of the machine (only
the model's own relative name at most): the text reaches the model. Whatever
the disk decides (missing, leading outside, a symlink met on the walk, a hard
link) is refused with one message, ``no_such_file``: a different answer for
"exists outside" and "does not exist" would let the model probe the machine's
files. Only the name checks, which judge the string alone, say more.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from reactq.shared.errors import SkillError

__all__ = ["MAX_FILE_BYTES", "check_relative", "no_such_file", "read_confined", "resolve_inside"]

MAX_FILE_BYTES = 256 * 1024
_POSIX_WALK = (
    hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd
)


def no_such_file(shown: str) -> SkillError:
    """The one refusal for a file that is missing, outside the skill, or linked.

    ``shown`` is the model's own name for the file.
    """
    return SkillError(f"the skill has no file {shown!r}")


def check_relative(file: str) -> list[str]:
    """The parts of a model-given relative path; SkillError if it could reach outside."""
    if not isinstance(file, str) or not file.strip():
        raise SkillError("the file name is empty")
    if "\0" in file or "\\" in file:
        raise SkillError("the file name may not contain NUL bytes or backslashes")
    if file.startswith("/") or (len(file) > 1 and file[1] == ":"):
        raise SkillError("the file must be a path relative to the skill's directory")
    parts = file.split("/")
    for part in parts:
        if part == "..":
            raise SkillError("the file may not go up a directory ('..')")
        if not part or part.startswith("."):
            raise SkillError("the file may not name hidden files or empty path parts")
    return parts


def resolve_inside(root: Path, file: str) -> list[str]:
    """``file``'s parts after resolving symlinks, refused unless it stays under ``root``.

    ``root`` must already be resolved. A symlink that points elsewhere inside
    the skill is followed here (the open then walks its target, never a link).
    """
    parts = check_relative(file)
    # Missing, outside, and inside-but-hidden are refused alike (see the module doc).
    try:
        resolved = Path(os.path.realpath(root.joinpath(*parts), strict=True))
        relative = resolved.relative_to(root)
    except (OSError, ValueError):
        raise no_such_file(file) from None
    out = list(relative.parts)
    if not out or any(p.startswith(".") for p in out):
        raise no_such_file(file)
    return out


def read_confined(root: Path, parts: list[str], shown: str) -> str:
    """The UTF-8 text of ``root/parts``, opened without following any symlink.

    ``shown`` is the name used in errors (the model's own).
    """
    if _POSIX_WALK:
        fd = _open_walk(root, parts, shown)
    else:  # pragma: no cover - non-POSIX: the resolve check is the guard
        try:
            fd = os.open(root.joinpath(*parts), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError:
            raise no_such_file(shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillError(f"{shown!r} is not a regular file")
        # A second name for the file may be anywhere on the filesystem (a hard link
        # planted in the skill reads a file outside it), so only a file with one
        # link is read. Checked on the open file: no link made after the check gets in.
        if info.st_nlink != 1:
            raise no_such_file(shown)
        if info.st_size > MAX_FILE_BYTES:
            raise SkillError(f"{shown!r} is larger than {MAX_FILE_BYTES // 1024} KiB")
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            data = handle.read(MAX_FILE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew after the fstat
        raise SkillError(f"{shown!r} is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillError(f"{shown!r} is not UTF-8 text") from None


def _open_walk(root: Path, parts: list[str], shown: str) -> int:
    """Open ``root/parts`` one part at a time, ``O_NOFOLLOW`` at every step."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | cloexec
    # O_NONBLOCK: opening a FIFO someone planted must not hang the turn.
    file_flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | cloexec
    try:
        current = os.open(root, dir_flags)
    except OSError:
        raise SkillError("the skill's directory cannot be opened") from None
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                nxt = os.open(part, file_flags if last else dir_flags, dir_fd=current)
            except OSError as exc:
                raise _refusal(exc, shown) from None
            os.close(current)
            current = nxt
        return_fd, current = current, -1
        return return_fd
    finally:
        if current >= 0:
            os.close(current)


def _refusal(exc: OSError, shown: str) -> SkillError:
    # ELOOP (EMLINK on FreeBSD): the part is a symlink (O_NOFOLLOW); ENOTDIR: a
    # symlink or a file where a directory was expected; ENOENT: missing. All read
    # as "no such file": telling a symlink from a missing file is an oracle.
    if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.ENOENT):
        return no_such_file(shown)
    return SkillError(f"the file {shown!r} cannot be opened ({exc.strerror or 'error'})")
