"""Skills: discovery, the frontmatter subset, the prompt section and load_skill's confinement."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from reactq.shared.errors import SkillError, ToolError
from reactq.worker.agent.skills import (
    MAX_FILE_BYTES,
    SkillSet,
    discover_skills,
    parse_frontmatter,
    split_frontmatter,
)
from reactq.worker.agent.skills.files import read_confined, resolve_inside

CATALOG = Path(__file__).parent / "skills" / "catalog"
posix_only = pytest.mark.skipif(os.name != "posix", reason="symlink and O_NOFOLLOW checks")


def write_skill(root: Path, name: str, front: str, body: str = "Do the thing.\n") -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return directory


# -- discovery -------------------------------------------------------------------------


def test_discovery_lists_skills_and_skips_hidden_and_plain_directories() -> None:
    skills = discover_skills(CATALOG)
    assert [s.name for s in skills] == ["pdf-forms", "release-notes"]
    notes = skills[1]
    assert (
        notes.description
        == (
            "Write release notes from a list of merged changes. "
            "Use when the user asks for a changelog or release notes.\n"
        ).strip()
    )
    assert notes.metadata["license"] == "MIT" and notes.metadata["version"] == "1.2"


def test_a_skill_written_for_another_runtime_loads_unchanged() -> None:
    skills = SkillSet.from_paths(CATALOG)
    skill = skills.get("pdf-forms")
    assert skill is not None
    assert skill.metadata["allowed-tools"] == "Bash, Read, Write"
    assert skill.metadata["license"] == "Complete terms in LICENSE.txt"
    assert "it's the go-to" in skill.description
    text = skills.load("pdf-forms")
    assert text.startswith("# Skill: pdf-forms\n\n# PDF forms")
    assert "python scripts/fill.py" in text
    assert "[Files in this skill: LICENSE.txt, reference.md, scripts/list_fields.py]" in text
    assert skills.load("pdf-forms", "reference.md").startswith("# Non-fillable forms")
    assert "list the fillable fields" in skills.load("pdf-forms", "scripts/list_fields.py").lower()


def test_prompt_section_lists_names_and_descriptions() -> None:
    skills = SkillSet.from_paths(CATALOG)
    section = skills.prompt_section()
    assert section.startswith("# Skills\n")
    assert "- release-notes: Write release notes from a list of merged changes. Use" in section
    assert "- pdf-forms: Fill in PDF forms" in section
    assert skills.system_prompt("Be brief.") == "Be brief.\n\n" + section
    assert SkillSet().system_prompt("Be brief.") == "Be brief."
    assert SkillSet().prompt_section() == ""


def test_names_descriptions_and_duplicates(tmp_path: Path) -> None:
    bad_names = ["Upper", "two--dashes", "-lead", "trail-", "under_score", "x" * 65]
    for index, name in enumerate(bad_names):
        root = tmp_path / f"r{index}"
        write_skill(root, name, f"name: {name}\ndescription: d\n")
        with pytest.raises(SkillError, match="is invalid"):
            discover_skills(root)
    root = tmp_path / "mismatch"
    write_skill(root, "folder", "name: other\ndescription: d\n")
    with pytest.raises(SkillError, match="must equal its directory's name 'folder'"):
        discover_skills(root)
    root = tmp_path / "long"
    write_skill(root, "long", f"name: long\ndescription: {'d' * 1025}\n")
    with pytest.raises(SkillError, match="1025 characters"):
        discover_skills(root)
    write_skill(tmp_path / "ok", "fine", f"name: fine\ndescription: {'d' * 1024}\n")
    assert discover_skills(tmp_path / "ok")[0].name == "fine"
    root = tmp_path / "nodesc"
    write_skill(root, "nodesc", "name: nodesc\n")
    with pytest.raises(SkillError, match="no 'description'"):
        discover_skills(root)
    write_skill(tmp_path / "a", "same", "name: same\ndescription: one\n")
    write_skill(tmp_path / "b", "same", "name: same\ndescription: two\n")
    with pytest.raises(SkillError, match="two skills are named 'same'"):
        discover_skills([tmp_path / "a", tmp_path / "b"])
    one = discover_skills(tmp_path / "a")[0]
    with pytest.raises(SkillError, match="two skills are named 'same'"):
        SkillSet([one, one])
    with pytest.raises(SkillError, match="does not exist"):
        discover_skills(tmp_path / "missing")


# -- the frontmatter subset ------------------------------------------------------------


def test_frontmatter_value_forms() -> None:
    lines = [
        "plain: a value with 'quotes' and C# # a comment",
        "single: 'it''s: fine # not a comment'",
        'double: "tab\\there \\u00e9 \\"q\\" \\\\" # comment',
        "literal: |",
        "  line one",
        "    indented",
        "",
        "  line three",
        "",
        "folded: >-",
        "  joined",
        "  words",
        "",
        "  new paragraph",
        "keep: |+",
        "  kept",
        "",
        "",
        "# a whole-line comment",
        "last: x",
    ]
    out = parse_frontmatter(lines, "s/SKILL.md")
    assert out == {
        "plain": "a value with 'quotes' and C#",
        "single": "it's: fine # not a comment",
        "double": 'tab\there é "q" \\',
        "literal": "line one\n  indented\n\nline three\n",
        "folded": "joined words\nnew paragraph",
        "keep": "kept\n\n\n",
        "last": "x",
    }


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("meta:", "empty value"),
        ("tags: [a, b]", r"starting with '\['"),
        ("obj: {a: 1}", r"starting with '\{'"),
        ("ref: *anchor", r"starting with '\*'"),
        ("tagged: !!str x", "starting with '!'"),
        ("- item", "expected 'key: value'"),
        ("  indented: x", "unexpected indentation"),
        ("key: a: b", "may not contain ': '"),
        ("open: 'never closed", "not closed on its line"),
        ('open: "never closed', "not closed on its line"),
        ('bad: "\\q"', "invalid escape"),
        ("after: 'x' y", "after the closing quote"),
        ("block: |2", "expected|starting with"),
        ("tab:\tx", ""),
    ],
)
def test_frontmatter_outside_the_subset_names_file_and_line(line: str, why: str) -> None:
    lines = ["name: x", "description: d", line]
    if line == "tab:\tx":  # a tab after the colon is accepted as YAML separation
        assert parse_frontmatter(lines, "x/SKILL.md")["tab"] == "x"
        return
    with pytest.raises(SkillError, match=rf"^x/SKILL\.md, line 4: .*({why})") as info:
        parse_frontmatter(lines, "x/SKILL.md", first_line=2)
    assert info.value.details == {"file": "x/SKILL.md", "line": 4}


def test_frontmatter_refuses_nested_mappings_lists_and_duplicates() -> None:
    with pytest.raises(SkillError, match=r"line 3: metadata: an empty value .*nested mapping"):
        parse_frontmatter(["name: x", "metadata:", "  author: me"], "f", first_line=2)
    with pytest.raises(SkillError, match=r"line 2: tags: an empty value .*list"):
        parse_frontmatter(["name: x", "tags:", "- a"], "f")
    with pytest.raises(SkillError, match="line 3: unexpected indentation"):
        parse_frontmatter(["text: |", "    deep", "  shallow"], "f")
    with pytest.raises(SkillError, match="line 2: duplicate key 'name'"):
        parse_frontmatter(["name: x", "name: y"], "f")


def test_split_frontmatter_needs_both_fences() -> None:
    front, body, first = split_frontmatter("\ufeff---\r\nname: a\r\n---\r\nbody\r\n", "a/SKILL.md")
    assert (front, body, first) == ({"name": "a"}, "body\n", 4)
    with pytest.raises(SkillError, match=r"line 1: a SKILL\.md must open with a '---' line"):
        split_frontmatter("name: a\n", "a/SKILL.md")
    with pytest.raises(SkillError, match="never closed"):
        split_frontmatter("---\nname: a\n", "a/SKILL.md")


def test_a_malformed_skill_file_is_named_relative_to_the_skills_dir(tmp_path: Path) -> None:
    write_skill(tmp_path, "broken", "name: broken\ndescription: d\nmetadata:\n  k: v\n")
    with pytest.raises(SkillError) as info:
        discover_skills(tmp_path)
    assert info.value.message.startswith("broken/SKILL.md, line 4: ")
    assert str(tmp_path) not in info.value.message


# -- load_skill: the tool and every refusal --------------------------------------------


@pytest.fixture
def skill_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    directory = write_skill(root, "demo", "name: demo\ndescription: A demo.\n", "Read guide.md.\n")
    (directory / "guide.md").write_text("the guide\n", encoding="utf-8")
    (directory / "sub").mkdir()
    (directory / "sub" / "deep.md").write_text("deep\n", encoding="utf-8")
    (directory / ".env").write_text("SECRET=1\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("TOP SECRET\n", encoding="utf-8")
    return root


async def test_load_skill_tool_reads_instructions_and_files(skill_dir: Path) -> None:
    load = SkillSet.from_paths(skill_dir).tool()
    assert load.name == "load_skill"
    assert set(load.parameters["properties"]) == {"name", "file"}
    assert load.parameters["required"] == ["name"]
    text = await load.call({"name": "demo"})
    assert text == "# Skill: demo\n\nRead guide.md.\n\n[Files in this skill: guide.md, sub/deep.md]"
    assert await load.call({"name": "demo", "file": "guide.md"}) == "the guide\n"
    assert await load.call({"name": "demo", "file": "sub/deep.md"}) == "deep\n"
    with pytest.raises(ToolError, match=r"no skill named 'nope' \(available: demo\)"):
        await load.call({"name": "nope"})


@pytest.mark.parametrize(
    ("file", "why"),
    [
        ("/etc/passwd", "relative to the skill's directory"),
        ("C:/Windows/win.ini", "relative to the skill's directory"),
        ("../outside.txt", r"go up a directory \('..'\)"),
        ("sub/../../outside.txt", r"go up a directory"),
        (".env", "hidden"),
        ("sub/.hidden", "hidden"),
        ("./guide.md", "hidden"),
        ("sub//deep.md", "empty path parts"),
        ("sub\\deep.md", "backslashes"),
        ("guide\0.md", "NUL"),
        ("", "empty"),
        ("missing.md", "no file 'missing.md'"),
        ("sub", "not a regular file"),
    ],
)
async def test_load_skill_refusals(skill_dir: Path, file: str, why: str) -> None:
    load = SkillSet.from_paths(skill_dir).tool()
    with pytest.raises(ToolError, match=why) as info:
        await load.call({"name": "demo", "file": file})
    assert str(skill_dir.parent) not in info.value.message
    assert "TOP SECRET" not in info.value.message


@posix_only
async def test_symlinks_leading_out_are_refused_and_inside_ones_read(skill_dir: Path) -> None:
    directory = skill_dir / "demo"
    outside = skill_dir.parent / "outside.txt"
    (directory / "link-out.md").symlink_to(outside)
    (directory / "dir-out").symlink_to(skill_dir.parent, target_is_directory=True)
    (directory / "link-in.md").symlink_to(directory / "guide.md")
    load = SkillSet.from_paths(skill_dir).tool()
    for file in ("link-out.md", "dir-out/outside.txt"):
        with pytest.raises(ToolError) as info:
            await load.call({"name": "demo", "file": file})
        assert info.value.message == f"the skill has no file {file!r}"
    assert await load.call({"name": "demo", "file": "link-in.md"}) == "the guide\n"
    listed = await load.call({"name": "demo"})
    assert "link-out.md" not in listed and "link-in.md" not in listed


def refusal(skills: SkillSet, file: str) -> str:
    """The refusal of ``file`` of skill 'demo', with the model's own name masked."""
    with pytest.raises(SkillError) as info:
        skills.load("demo", file)
    assert "TOP SECRET" not in info.value.message
    return info.value.message.replace(repr(file), "<file>")


@posix_only
def test_outside_and_missing_files_are_refused_alike(skill_dir: Path) -> None:
    """No existence oracle: a name that leads out (to a file that exists or not), a
    hard link and a missing file all get the same refusal, word for word."""
    directory = skill_dir / "demo"
    outside = skill_dir.parent / "outside.txt"
    (directory / "link-out.md").symlink_to(outside)
    (directory / "link-dangling.md").symlink_to(skill_dir.parent / "no-such.txt")
    (directory / "dir-out").symlink_to(skill_dir.parent, target_is_directory=True)
    (directory / "link-hidden.md").symlink_to(directory / ".env")
    os.link(outside, directory / "hard.md")
    skills = SkillSet.from_paths(skill_dir)
    names = [
        "missing.md",
        "sub/missing.md",
        "guide.md/below",
        "link-out.md",
        "link-dangling.md",
        "dir-out/outside.txt",
        "dir-out/no-such.txt",
        "link-hidden.md",
        "hard.md",
    ]
    assert {name: refusal(skills, name) for name in names} == dict.fromkeys(
        names, "the skill has no file <file>"
    )
    # The traversal refusals stay: they judge the name alone, never the disk.
    assert "go up a directory" in refusal(skills, "../outside.txt")


@posix_only
def test_a_hard_link_to_a_file_outside_is_not_read_nor_listed(skill_dir: Path) -> None:
    directory = skill_dir / "demo"
    os.link(skill_dir.parent / "outside.txt", directory / "notes.md")
    skills = SkillSet.from_paths(skill_dir)
    with pytest.raises(SkillError, match=r"^the skill has no file 'notes\.md'$"):
        skills.load("demo", "notes.md")
    # Checked on the open file, so a link made after the name was checked is refused too.
    parts = resolve_inside(directory.resolve(), "guide.md")
    os.link(directory / "guide.md", skill_dir.parent / "guide-copy.md")
    with pytest.raises(SkillError, match=r"^the skill has no file 'guide\.md'$"):
        read_confined(directory.resolve(), parts, "guide.md")
    listed = skills.load("demo")
    assert "notes.md" not in listed and "guide.md," not in listed


@posix_only
def test_a_skill_directory_symlinked_out_of_the_skills_dir_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "kept", "name: kept\ndescription: d\n")
    elsewhere = write_skill(tmp_path / "elsewhere", "planted", "name: planted\ndescription: d\n")
    (elsewhere / "secret.md").write_text("TOP SECRET\n", encoding="utf-8")
    (root / "planted").symlink_to(elsewhere, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="reactq.agent"):
        skills = SkillSet.from_paths(root)
    assert skills.names == ["kept"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'planted'" in w for w in warnings), warnings
    with pytest.raises(SkillError, match="no skill named 'planted'"):
        skills.load("planted", "secret.md")
    # A skills directory reached through a symlink is fine: the check is on where it leads.
    (tmp_path / "skills-link").symlink_to(root, target_is_directory=True)
    assert [s.name for s in discover_skills(tmp_path / "skills-link")] == ["kept"]


@posix_only
def test_a_symlink_swapped_in_after_the_check_is_refused(skill_dir: Path) -> None:
    directory = (skill_dir / "demo").resolve()
    outside = skill_dir.parent / "outside.txt"
    # The file passes the check, then becomes a symlink out before the open.
    parts = resolve_inside(directory, "guide.md")
    (directory / "guide.md").unlink()
    (directory / "guide.md").symlink_to(outside)
    with pytest.raises(SkillError, match=r"^the skill has no file 'guide\.md'$"):
        read_confined(directory, parts, "guide.md")
    # An intermediate directory swapped for a symlink is refused the same way.
    parts = resolve_inside(directory, "sub/deep.md")
    (directory / "sub").rename(directory / "sub-old")
    (directory / "sub").symlink_to(directory / "sub-old", target_is_directory=True)
    with pytest.raises(SkillError, match=r"^the skill has no file 'sub/deep\.md'$"):
        read_confined(directory, parts, "sub/deep.md")


@posix_only
def test_symlink_swap_race_never_reads_outside(skill_dir: Path) -> None:
    skills = SkillSet.from_paths(skill_dir)
    directory = (skill_dir / "demo").resolve()
    outside = skill_dir.parent / "outside.txt"
    target = directory / "race.md"
    target.write_text("inside\n", encoding="utf-8")
    stop = threading.Event()

    def swapper() -> None:
        # Flip race.md between a regular file and a symlink out, as fast as possible.
        while not stop.is_set():
            tmp_link = directory / "race-link.tmp"
            tmp_file = directory / "race-file.tmp"
            tmp_link.unlink(missing_ok=True)
            tmp_link.symlink_to(outside)
            os.replace(tmp_link, target)
            tmp_file.write_text("inside\n", encoding="utf-8")
            os.replace(tmp_file, target)

    thread = threading.Thread(target=swapper)
    thread.start()
    seen: set[str] = set()
    try:
        for _ in range(3000):
            try:
                seen.add(skills.load("demo", "race.md"))
            except SkillError as exc:
                seen.add(exc.message)
    finally:
        stop.set()
        thread.join(10)
    assert "TOP SECRET\n" not in seen
    assert "inside\n" in seen


@posix_only
def test_only_regular_small_utf8_files_are_read(skill_dir: Path) -> None:
    directory = skill_dir / "demo"
    skills = SkillSet.from_paths(skill_dir)
    (directory / "big.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    (directory / "exact.md").write_bytes(b"x" * MAX_FILE_BYTES)
    (directory / "binary.bin").write_bytes(b"\xff\xfe\x00")
    os.mkfifo(directory / "pipe")
    with pytest.raises(SkillError, match="larger than 256 KiB"):
        skills.load("demo", "big.md")
    assert len(skills.load("demo", "exact.md")) == MAX_FILE_BYTES
    with pytest.raises(SkillError, match="not UTF-8 text"):
        skills.load("demo", "binary.bin")
    with pytest.raises(SkillError, match="not a regular file"):
        skills.load("demo", "pipe")


@posix_only
def test_a_symlinked_or_hard_linked_skill_md_skips_that_skill_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "elsewhere.md").write_text("---\nname: x\ndescription: d\n---\n", "utf-8")
    root = tmp_path / "skills"
    (root / "x").mkdir(parents=True)
    (root / "x" / "SKILL.md").symlink_to(tmp_path / "elsewhere.md")
    write_skill(root, "kept", "name: kept\ndescription: d\n")
    hard = write_skill(root, "hard", "name: hard\ndescription: d\n")
    os.link(hard / "SKILL.md", tmp_path / "hard-copy.md")
    with caplog.at_level(logging.WARNING, logger="reactq.agent"):
        assert [s.name for s in discover_skills(root)] == ["kept"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'x'" in w for w in warnings) and any("'hard'" in w for w in warnings), warnings


def test_public_surface() -> None:
    import reactq.worker.agent.skills as package

    assert sorted(package.__all__) == sorted(
        [
            "Skill",
            "SkillSet",
            "discover_skills",
            "parse_frontmatter",
            "split_frontmatter",
            "LOAD_SKILL_TOOL",
            "MAX_DESCRIPTION_CHARS",
            "MAX_FILE_BYTES",
        ]
    )
