"""Agent skills: directories of instructions the model loads on demand with ``load_skill``."""

from reactq.worker.agent.skills.files import MAX_FILE_BYTES
from reactq.worker.agent.skills.frontmatter import parse_frontmatter, split_frontmatter
from reactq.worker.agent.skills.skillset import (
    LOAD_SKILL_TOOL,
    MAX_DESCRIPTION_CHARS,
    Skill,
    SkillSet,
    discover_skills,
)

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # skills
    "Skill",
    "SkillSet",
    "discover_skills",
    # frontmatter
    "parse_frontmatter",
    "split_frontmatter",
    # limits and names
    "LOAD_SKILL_TOOL",
    "MAX_DESCRIPTION_CHARS",
    "MAX_FILE_BYTES",
]
