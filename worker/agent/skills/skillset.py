"""Skills: directories of instructions the model loads on demand.

A skill is a directory holding ``SKILL.md``: frontmatter (``name``,
``description``) then markdown instructions, plus any files those instructions
refer to. The system prompt lists each skill's name and description; the model
calls ``load_skill(name)`` for the instructions and ``load_skill(name, file)``
for a file of the skill, when a task needs them.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from reactq.shared.errors import SkillError, ToolError
from reactq.worker.agent.skills.files import read_confined, resolve_inside
from reactq.worker.agent.skills.frontmatter import split_frontmatter
from reactq.worker.agent.tools import Tool, tool

__all__ = [
    "LOAD_SKILL_TOOL",
    "MAX_DESCRIPTION_CHARS",
    "SKILLS_PROMPT_HEADER",
    "Skill",
    "SkillSet",
    "discover_skills",
]

SKILL_FILE = "SKILL.md"
SKILL_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_LISTED_FILES = 100
LOAD_SKILL_TOOL = "load_skill"
SKILLS_PROMPT_HEADER = (
    "# Skills\n"
    "Skills hold instructions for particular tasks. When a task matches a skill's "
    f"description, call `{LOAD_SKILL_TOOL}` with its name first and follow what it says; "
    f"load a file it mentions with `{LOAD_SKILL_TOOL}(name, file)`."
)

PathLike = str | os.PathLike[str]

log = logging.getLogger("reactq.agent")


@dataclass(frozen=True)
class Skill:
    """One discovered skill."""

    name: str
    """Its name (equal to its directory's name)."""
    description: str
    """When to use it; shown in the system prompt."""
    directory: Path
    """Its directory, resolved; files are read only from under it."""
    metadata: dict[str, str] = field(default_factory=dict, compare=False)
    """Every frontmatter key, as strings (``license``, ``allowed-tools`` ...)."""

    def instructions(self) -> str:
        """The markdown after the frontmatter, read now (the file may have changed)."""
        _, body, _ = split_frontmatter(self._read(SKILL_FILE), f"{self.name}/{SKILL_FILE}")
        return body.strip("\n")

    def read(self, file: str) -> str:
        """The text of ``file`` (relative to the skill's directory); SkillError if refused."""
        return read_confined(self.directory, resolve_inside(self.directory, file), file)

    def files(self) -> list[str]:
        """Relative names of the skill's other files: regular files with one link only
        (hidden names, symlinks and hard links, which ``read`` refuses, left out)."""
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.directory):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            base = Path(dirpath)
            for name in sorted(filenames):
                path = base / name
                if name.startswith(".") or not _single_regular_file(path):
                    continue
                relative = path.relative_to(self.directory).as_posix()
                if relative != SKILL_FILE:
                    out.append(relative)
                if len(out) >= MAX_LISTED_FILES:
                    return out
        return out

    def _read(self, file: str) -> str:
        return read_confined(self.directory, [file], file)


def discover_skills(paths: PathLike | Iterable[PathLike]) -> list[Skill]:
    """Every ``<name>/SKILL.md`` under ``paths`` (one directory or several), by name.

    Hidden directories are skipped and so are directories without ``SKILL.md``.
    A skill whose directory is a symlink leading out of its skills directory, or
    whose ``SKILL.md`` is a symlink or a hard link, is skipped with a warning
    naming it: its files would be read from elsewhere, yet one such skill must not
    stop the agent from building with the others.
    Raises SkillError for a missing root, a malformed skill or two skills of one name.
    """
    roots = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    skills: dict[str, Skill] = {}
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            raise SkillError(f"the skills directory {os.fspath(root)!r} does not exist")
        # The skills directory itself may be reached through a symlink (a mount, a
        # deploy layout); each skill is then compared with where it leads.
        real_base = Path(os.path.realpath(base))
        for entry in sorted(base.iterdir(), key=lambda p: p.name):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            if not os.path.lexists(entry / SKILL_FILE):  # lexists: a dangling link is seen
                continue
            directory = Path(os.path.realpath(entry))
            why = _refused(directory, real_base)
            if why is not None:
                log.warning("skill %r skipped: %s", entry.name, why)
                continue
            if not (directory / SKILL_FILE).is_file():  # no symlink now: a directory, a FIFO
                continue
            skill = _load(entry, directory)
            if skill.name in skills:
                raise SkillError(
                    f"two skills are named {skill.name!r}; skill names must be unique",
                    skill=skill.name,
                )
            skills[skill.name] = skill
    return sorted(skills.values(), key=lambda s: s.name)


def _single_regular_file(path: Path) -> bool:
    """Whether ``path`` itself (not a symlink's target) is a regular file with one link."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _refused(directory: Path, real_base: Path) -> str | None:
    """Why the skill at ``directory`` (resolved) must be skipped, or None."""
    if directory == real_base or not directory.is_relative_to(real_base):
        return "its directory is a symlink leading out of the skills directory"
    try:
        info = os.lstat(directory / SKILL_FILE)
    except OSError:
        return None  # gone since it was listed: the caller skips it as no skill
    if stat.S_ISLNK(info.st_mode):
        return f"its {SKILL_FILE} is a symlink"
    if stat.S_ISREG(info.st_mode) and info.st_nlink != 1:
        return f"its {SKILL_FILE} is a hard link (it has {info.st_nlink} names)"
    return None


def _load(entry: Path, resolved: Path) -> Skill:
    """The skill in ``entry`` (a directory of a skills directory) resolved to ``resolved``."""
    source = f"{entry.name}/{SKILL_FILE}"
    text = read_confined(resolved, [SKILL_FILE], source)
    front, _, _ = split_frontmatter(text, source)

    def fail(why: str) -> SkillError:
        return SkillError(f"{source}: {why}", file=source)

    name = front.get("name")
    if not name:
        raise fail("the frontmatter has no 'name'")
    if len(name) > MAX_NAME_CHARS or not SKILL_NAME_RE.fullmatch(name):
        raise fail(
            f"name {name!r} is invalid: use 1-{MAX_NAME_CHARS} lowercase letters and digits "
            "in hyphen-separated runs (e.g. 'pdf-tools')"
        )
    if name != entry.name:
        raise fail(f"name {name!r} must equal its directory's name {entry.name!r}")
    description = (front.get("description") or "").strip()
    if not description:
        raise fail("the frontmatter has no 'description'")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise fail(
            f"the description has {len(description)} characters; "
            f"at most {MAX_DESCRIPTION_CHARS} are allowed"
        )
    return Skill(name, description, resolved, dict(front))


class SkillSet:
    """The skills one agent offers: a ``# Skills`` prompt section and the ``load_skill`` tool."""

    def __init__(self, skills: Sequence[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            if skill.name in self._skills:
                raise SkillError(
                    f"two skills are named {skill.name!r}; skill names must be unique",
                    skill=skill.name,
                )
            self._skills[skill.name] = skill

    @classmethod
    def from_paths(cls, paths: PathLike | Iterable[PathLike]) -> SkillSet:
        """Discover the skills under ``paths`` (see ``discover_skills``)."""
        return cls(discover_skills(paths))

    @property
    def names(self) -> list[str]:
        """Skill names, sorted."""
        return sorted(self._skills)

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, or None."""
        return self._skills.get(name)

    def __len__(self) -> int:
        return len(self._skills)

    def __repr__(self) -> str:
        return f"SkillSet({self.names!r})"

    def prompt_section(self) -> str:
        """The ``# Skills`` section listing every skill; empty when there is none."""
        if not self._skills:
            return ""
        lines = [SKILLS_PROMPT_HEADER, ""]
        for name in self.names:
            description = " ".join(self._skills[name].description.split())
            lines.append(f"- {name}: {description}")
        return "\n".join(lines)

    def system_prompt(self, base: str) -> str:
        """``base`` with the skills section appended (``base`` unchanged with no skills)."""
        section = self.prompt_section()
        if not section:
            return base
        return f"{base}\n\n{section}" if base else section

    def load(self, name: str, file: str | None = None) -> str:
        """What ``load_skill`` returns: the instructions, or one file's text."""
        skill = self._skills.get(name)
        if skill is None:
            available = ", ".join(self.names) or "none"
            raise SkillError(f"there is no skill named {name!r} (available: {available})")
        if file is not None:
            return skill.read(file)
        text = f"# Skill: {skill.name}\n\n{skill.instructions()}"
        others = skill.files()
        if others:
            text += "\n\n[Files in this skill: " + ", ".join(others) + "]"
        return text

    def tool(self) -> Tool:
        """The ``load_skill`` tool over these skills (refusals are tool errors the model reads)."""

        def load_skill(  # sync: the tool runs it in a thread, off the event loop
            name: Annotated[str, Field(description="The skill's name, as listed under # Skills.")],
            file: Annotated[
                str | None,
                Field(
                    description="A file of the skill, relative to its directory "
                    "(omit it for the skill's instructions)."
                ),
            ] = None,
        ) -> str:
            try:
                return self.load(name, file)
            except SkillError as exc:
                raise ToolError(exc.message, tool=LOAD_SKILL_TOOL) from None

        return tool(
            name=LOAD_SKILL_TOOL,
            read_only=True,
            description="Load a skill's instructions, or one of its files, by name.",
        )(load_skill)
