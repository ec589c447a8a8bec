"""Agent(skills_dir=..., mcp_servers=...): wiring, and nothing changes without skills."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from reactq.worker import Agent, AgentLoop, LoopConfig, Registry, ScriptedLLM, ToolMode, tool
from reactq.worker.agent.mcp import MCPClient, MCPProvider
from reactq.worker.definitions import AgentConfigError

CATALOG = Path(__file__).parent / "skills" / "catalog"


def lookup(key: str) -> str:
    """Look a key up."""
    return key


@pytest.mark.parametrize("mode", [ToolMode.NATIVE, ToolMode.JSON])
def test_without_skills_requests_and_prompts_are_unchanged(tmp_path: Path, mode: ToolMode) -> None:
    plain = AgentLoop(
        ScriptedLLM([]),
        Registry([lookup]),
        LoopConfig(model="m", system_prompt="Be brief.", tool_mode=mode),
    )
    for skills_dir in (None, tmp_path):  # no skills_dir, and a directory with no skill
        agent = Agent(
            name="a", model="m", system_prompt="Be brief.", tools=[lookup], tool_mode=mode,
            skills_dir=skills_dir,
        )  # fmt: skip
        assert len(agent.skills) == 0
        loop = agent.build_loop(ScriptedLLM([]))
        assert loop.prefix == plain.prefix
        assert loop.tools == plain.tools
        assert loop.registry.names == ["lookup"]


def test_skills_join_the_prompt_and_the_registry() -> None:
    agent = Agent(
        name="a", model="m", system_prompt="Be brief.", tools=[lookup], skills_dir=CATALOG
    )
    assert agent.skills.names == ["pdf-forms", "release-notes"]
    loop = agent.build_loop(ScriptedLLM([]))
    assert loop.registry.names == ["lookup", "load_skill"]
    assert loop.tools is not None and loop.tools[1]["function"]["name"] == "load_skill"
    prompt = loop.prefix[0]["content"]
    assert prompt.startswith("Be brief.\n\n# Skills\n")
    assert "- pdf-forms: Fill in PDF forms" in prompt
    json_agent = Agent(name="j", model="m", tool_mode=ToolMode.JSON, skills_dir=CATALOG)
    json_prompt = json_agent.build_loop(ScriptedLLM([])).prefix[0]["content"]
    assert json_prompt.startswith("# Skills\n") and "- load_skill: " in json_prompt


def test_bad_skills_and_servers_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "SKILL.md").write_text("---\nname: broken\nx: [1]\n---\n", "utf-8")
    with pytest.raises(AgentConfigError, match=r"agent 'a': broken/SKILL\.md, line 3: "):
        Agent(name="a", skills_dir=tmp_path)
    with pytest.raises(AgentConfigError, match="does not exist"):
        Agent(name="a", skills_dir=tmp_path / "missing")

    @tool(name="load_skill")
    def clash(name: str) -> str:
        """A user tool that takes the built-in's name."""
        return name

    with pytest.raises(AgentConfigError, match="'load_skill' is already registered"):
        Agent(name="a", tools=[clash], skills_dir=CATALOG)
    assert Agent(name="a", tools=[clash]).registry().names == ["load_skill"]
    with pytest.raises(AgentConfigError, match="MCPClient or MCPProvider"):
        Agent(name="a", mcp_servers=["npx server"])  # type: ignore[list-item]
    with pytest.raises(AgentConfigError, match="must be a list"):
        Agent(name="a", mcp_servers="npx server")  # type: ignore[arg-type]


def test_mcp_servers_are_normalised_to_providers_without_connecting() -> None:
    client = MCPClient(command=[sys.executable, "-m", "tests.mcp_servers.demo", "stdio"])
    provider = MCPProvider(client, prefix="p_")
    agent = Agent(name="a", mcp_servers=[client, provider])
    assert [type(p).__name__ for p in agent.mcp_servers] == ["MCPProvider", "MCPProvider"]
    assert agent.mcp_servers[0].client is client and agent.mcp_servers[1] is provider
    assert not client.connected
    assert agent.registry().names == []  # MCP tools are attached on a running loop


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks")
def test_a_symlinked_skill_md_leaves_the_agent_with_the_other_skills(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "elsewhere.md").write_text("---\nname: linked\ndescription: d\n---\n", "utf-8")
    (tmp_path / "skills" / "linked").mkdir(parents=True)
    (tmp_path / "skills" / "linked" / "SKILL.md").symlink_to(tmp_path / "elsewhere.md")
    (tmp_path / "skills" / "plain").mkdir()
    (tmp_path / "skills" / "plain" / "SKILL.md").write_text(
        "---\nname: plain\ndescription: A plain skill.\n---\nDo it.\n", "utf-8"
    )
    with caplog.at_level(logging.WARNING, logger="reactq.agent"):
        agent = Agent(name="a", model="m", skills_dir=tmp_path / "skills")
    assert agent.skills.names == ["plain"]
    assert agent.build_loop(ScriptedLLM([])).registry.names == ["load_skill"]
    assert any(
        r.levelno == logging.WARNING and "'linked'" in r.getMessage() for r in caplog.records
    )
