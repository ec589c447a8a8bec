"""Agent definitions and load_agents."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings
from reactq.worker import (
    Agent,
    AgentLoop,
    LoopConfig,
    OpenAICompatibleClient,
    ScriptedLLM,
    ToolMode,
    load_agents,
)
from reactq.worker.definitions import AgentConfigError


def lookup(key: str) -> str:
    """Look a key up."""
    return key


def test_agent_validates_at_construction() -> None:
    for name in ("", "has space", "x" * 65, "ünï"):
        with pytest.raises(ConfigError, match="agent name"):
            Agent(name=name)
    with pytest.raises(AgentConfigError, match="max_iterations"):
        Agent(name="a", max_iterations=0)
    with pytest.raises(ValueError, match="tool_timeout"):  # AgentConfigError is a ValueError too
        Agent(name="a", tool_timeout=-1)
    with pytest.raises(AgentConfigError, match="tool_message_role='user' conflicts"):
        Agent(name="a", tool_mode=ToolMode.NATIVE, tool_message_role="user")
    json_agent = Agent(name="a", tool_mode="json", tool_message_role="user")
    assert json_agent.loop.tool_mode is ToolMode.JSON
    with pytest.raises(AgentConfigError, match="already registered"):
        Agent(name="a", tools=[lookup, lookup])
    with pytest.raises(
        AgentConfigError,
        match=r"unknown setting 'max_iteration' \(did you mean 'max_iterations'\?\)",
    ):
        Agent(name="a", max_iteration=3)
    with pytest.raises(AgentConfigError, match="agent 'a': delta_interval must be >= 0"):
        Agent(name="a", delta_interval=-1)
    with pytest.raises(AgentConfigError, match="loop must be a LoopConfig"):
        Agent(name="a", loop={"max_iterations": 3})  # type: ignore[arg-type]


def test_an_agent_holds_one_loop_config_its_knobs_override() -> None:
    shared = LoopConfig(max_iterations=4, budget_message="over budget")
    agent = Agent(name="a", loop=shared, max_iterations=6, system_prompt="Be brief.")
    assert agent.loop == dataclasses.replace(shared, max_iterations=6, system_prompt="Be brief.")
    assert Agent(name="b", loop=shared).loop is shared
    assert Agent(name="c").loop == LoopConfig()
    # No knob is declared on Agent too (LoopConfig's is the one declaration), and
    # every one is an Agent keyword.
    knobs = {f.name for f in dataclasses.fields(LoopConfig)}
    assert {f.name for f in dataclasses.fields(Agent)} & knobs == set()
    defaults = LoopConfig()
    for knob in knobs:
        assert Agent(name="d", **{knob: getattr(defaults, knob)}).loop == defaults


def test_agent_wraps_tools_hides_key_and_builds_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(name="a", tools=[lookup], api_key="sk-very-secret", max_iterations=4)
    assert "sk-very-secret" not in repr(agent)
    assert agent.registry().names == ["lookup"]

    assert agent.resolved_model(Settings()) == "gpt-4o-mini"
    with_model = Settings(model="env-model")
    assert agent.resolved_model(with_model) == "env-model"
    assert Agent(name="b", model="own").resolved_model(with_model) == "own"
    # Without settings, they are read from the environment (through Settings).
    monkeypatch.setenv("REACTQ_MODEL", "env-model")
    assert agent.resolved_model() == "env-model"

    loop = agent.build_loop(ScriptedLLM([]), settings=with_model)
    assert isinstance(loop, AgentLoop)
    assert (loop.model, loop.config.max_iterations, loop.registry.names) == (
        "env-model",
        4,
        ["lookup"],
    )


async def test_build_llm_uses_the_agents_endpoint_else_the_settings() -> None:
    agent = Agent(name="a", base_url="http://127.0.0.1:9/v1", api_key="sk-x")
    settings = Settings(
        openai_base_url="http://127.0.0.1:8/v1", openai_api_key=SecretStr("sk-settings")
    )
    for built, url in ((agent, ":9/v1"), (Agent(name="b"), ":8/v1")):
        llm = built.build_llm(settings, max_retries=0)
        try:
            assert isinstance(llm, OpenAICompatibleClient)
            assert llm.base_url.startswith(f"http://127.0.0.1{url}")
            assert "sk-x" not in repr(llm) and "sk-settings" not in repr(llm)
        finally:
            await llm.aclose()


def test_load_agents_from_the_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    agents = load_agents(["examples.weather:agent"])
    assert list(agents) == ["weather"]
    assert agents["weather"].registry().names == ["get_weather"]
    assert load_agents(["examples.weather"])["weather"] is agents["weather"]


@pytest.fixture
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A temporary working directory and a unique module-name prefix."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    prefix = f"agents_{uuid.uuid4().hex[:8]}"
    yield tmp_path, prefix
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]


def _write(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.py").write_text("from reactq.worker import Agent\n" + body)


def test_load_agents_lists_and_errors(agent_dir: tuple[Path, str]) -> None:
    directory, prefix = agent_dir
    _write(directory, f"{prefix}_many", "team = [Agent(name='one'), Agent(name='two')]\n")
    _write(directory, f"{prefix}_dup", "agent = Agent(name='one')\n")
    _write(directory, f"{prefix}_bad", "agent = 42\nother = Agent(name='x')\n")
    _write(directory, f"{prefix}_broken", "import no_such_dependency_zz\n")

    assert list(load_agents([f"{prefix}_many:team"])) == ["one", "two"]
    with pytest.raises(ConfigError, match="two agents are named 'one'"):
        load_agents([f"{prefix}_many:team", f"{prefix}_dup"])
    with pytest.raises(ConfigError, match="must be an Agent or a list of Agents, not int"):
        load_agents([f"{prefix}_bad"])
    with pytest.raises(ConfigError, match="has no attribute 'nope'; Agents it defines: other"):
        load_agents([f"{prefix}_bad:nope"])
    with pytest.raises(ConfigError, match=f"no module named '{prefix}_missing'"):
        load_agents([f"{prefix}_missing:agent"])
    # The module's own import fails: where, in the module, it failed.
    with pytest.raises(
        ConfigError,
        match=rf"importing .* failed at .*{prefix}_broken\.py:\d+: No module named 'no_such",
    ):
        load_agents([f"{prefix}_broken"])
    with pytest.raises(ConfigError, match="module\\[:attr\\]"):
        load_agents([":agent"])
