"""Issue 31: the Agent Protocol's assistants, store and crons on a real ``reactq serve``,
driven by LangGraph's own client (``langgraph_sdk``, sync and async), unmodified.

No worker runs: the agents are announced in the registry as a worker would (an
assistant is an announced agent), and no beat fires a cron here (a cron is a reactq
schedule: tests/test_schedules_beat.py fires those).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from reactq import Producer
from reactq.producer.gateway.agent_protocol.assistants import assistant_id_of
from reactq.shared.protocol.workers import AgentProfile
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, start_gateway

pytestmark = pytest.mark.e2e

KEYS = {"admin": "admin-key", "acme": "acme-key", "acme_ag": "ag-key"}
API_KEYS = "admin:admin-key,acme:acme-key;prefix=acme-,acmeag:ag-key;prefix=acme-;agents=beta"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("ap-side")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-apside",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": API_KEYS,
    }
    settings = Settings.from_env(
        {},
        redis_url=redis_url,
        namespace=env["REACTQ_NAMESPACE"],
        database_url=env["REACTQ_DATABASE_URL"],
    )

    async def announce() -> None:
        async with Producer(settings) as p:
            profiles = {
                "alpha": AgentProfile(
                    overridable=frozenset({"temperature"}), config_version="cv-alpha-1"
                )
            }
            await p.registry.register_agents(["alpha", "beta"], "test-registry", profiles)

    asyncio.run(announce())
    with start_gateway(env, Path(tmp), KEYS["admin"]) as gw:
        yield gw


class Clients:
    """LangGraph's sync clients of the gateway, one a key, closed after the test."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.made: list[SyncLangGraphClient] = []

    def __call__(self, who: str = "admin") -> Any:
        """LangGraph's sync client with the key as its ``api_key=`` (sent as X-Api-Key;
        typed Any: the SDK types a cron's creation as a Run, and its answers as optional)."""
        client = get_sync_client(url=self.gateway.url, api_key=KEYS[who])
        self.made.append(client)
        return client


@pytest.fixture
def sdk(gateway: Gateway) -> Iterator[Clients]:
    clients = Clients(gateway)
    yield clients
    for client in clients.made:
        client.close()


def test_assistants_search_get_count_schemas_graph(sdk: Clients, namespace: str) -> None:
    client = sdk()
    found = client.assistants.search()
    assert [a["graph_id"] for a in found] == ["alpha", "beta"]
    alpha = found[0]
    assert alpha["assistant_id"] == assistant_id_of(f"{namespace}-apside", "alpha")
    assert str(uuid.UUID(alpha["assistant_id"])) == alpha["assistant_id"]
    assert alpha["name"] == "alpha" and alpha["version"] == 1
    assert alpha["metadata"]["config_version"] == "cv-alpha-1"
    assert alpha["created_at"] and alpha["updated_at"] and "configurable" in alpha["config"]

    assert [a["graph_id"] for a in client.assistants.search(graph_id="beta")] == ["beta"]
    assert [a["graph_id"] for a in client.assistants.search(limit=1, offset=1)] == ["beta"]
    page = client.assistants.search(limit=1, response_format="object")
    assert [a["graph_id"] for a in page["assistants"]] == ["alpha"] and page["next"] == "1"
    assert client.assistants.search(metadata={"config_version": "cv-alpha-1"}) == [alpha]
    assert client.assistants.count() == 2
    assert client.assistants.count(graph_id="alpha") == 1

    # By its UUID or by its graph id, the same assistant.
    assert client.assistants.get(alpha["assistant_id"]) == alpha
    assert client.assistants.get("alpha") == alpha
    schemas = client.assistants.get_schemas("alpha")
    assert schemas["graph_id"] == "alpha"
    assert "messages" in schemas["state_schema"]["properties"]
    assert schemas["input_schema"]["properties"]["messages"]["type"] == "array"
    graph = client.assistants.get_graph(alpha["assistant_id"])
    assert {n["id"] for n in graph["nodes"]} >= {"agent", "tools"}
    assert client.assistants.get_subgraphs("alpha") == {}
    assert client.assistants.get_versions(alpha["assistant_id"]) == [alpha]
    assert client.assistants.set_latest(alpha["assistant_id"], 1) == alpha
    with pytest.raises(httpx.HTTPStatusError) as no_version:
        client.assistants.set_latest("alpha", 2)
    assert no_version.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as hosted:
        client.assistants.delete("alpha")
    assert hosted.value.response.status_code == 409

    with pytest.raises(httpx.HTTPStatusError) as missing:
        client.assistants.get("nobody")
    assert missing.value.response.status_code == 404
    assert missing.value.response.json()["code"] == "assistant_not_found"


def test_an_assistant_with_a_config_over_an_agent(sdk: Clients) -> None:
    client, acme = sdk(), sdk("acme")
    tag = uuid.uuid4().hex[:8]
    made = client.assistants.create(
        "alpha",
        config={"configurable": {"temperature": 0.2}},
        metadata={"tag": tag},
        name="careful alpha",
    )
    assert made["graph_id"] == "alpha" and made["name"] == "careful alpha"
    assert made["config"]["configurable"] == {"temperature": 0.2}
    assert client.assistants.get(made["assistant_id"]) == made
    assert client.assistants.search(metadata={"tag": tag}) == [made]
    assert client.assistants.count(metadata={"tag": tag}) == 1
    # Its id again: 409, unless asked to do nothing.
    with pytest.raises(httpx.HTTPStatusError) as taken:
        client.assistants.create("alpha", assistant_id=made["assistant_id"])
    assert taken.value.response.status_code == 409
    again = client.assistants.create(
        "alpha", assistant_id=made["assistant_id"], if_exists="do_nothing"
    )
    assert again == made
    # A run (here a cron) on it goes to its agent.
    cron = client.crons.create(
        made["assistant_id"],
        schedule="0 9 * * *",
        input={"messages": [{"role": "user", "content": "x"}]},
    )
    assert cron["assistant_id"] == assistant_id_of_alpha(client)
    client.crons.delete(cron["cron_id"])
    # Another tenant does not see it.
    assert acme.assistants.search(metadata={"tag": tag}) == []
    # Nor runs on it: to that tenant's key its id names no agent (not alpha, nor its config).
    with pytest.raises(httpx.HTTPStatusError) as foreign:
        acme.runs.create(
            f"acme-{tag}",
            made["assistant_id"],
            input={"messages": [{"role": "user", "content": "x"}]},
            if_not_exists="create",
        )
    assert foreign.value.response.status_code == 422
    assert foreign.value.response.json()["code"] == "unknown_agent"

    changed = client.assistants.update(
        made["assistant_id"], config={"configurable": {"temperature": 0.7}}, metadata={"v": 2}
    )
    assert changed["config"]["configurable"] == {"temperature": 0.7}
    assert changed["metadata"] == {"tag": tag, "v": 2} and changed["name"] == "careful alpha"
    assert client.assistants.get(made["assistant_id"]) == changed
    with pytest.raises(httpx.HTTPStatusError) as not_allowed:
        client.assistants.update(made["assistant_id"], config={"configurable": {"model": "x"}})
    assert not_allowed.value.response.status_code == 422
    with pytest.raises(httpx.HTTPStatusError) as hosted:
        client.assistants.update("alpha", metadata={"v": 1})
    assert hosted.value.response.status_code == 409

    client.assistants.delete(made["assistant_id"])
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.assistants.get(made["assistant_id"])
    assert gone.value.response.status_code == 404

    for config, code in (
        ({"configurable": {"model": "other"}}, "override_not_allowed"),
        ({"configurable": {"temperature": "hot"}}, "invalid_override"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.assistants.create("alpha", config=config)
        assert refused.value.response.status_code == 422
        assert refused.value.response.json()["code"] == code
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        client.assistants.create("nobody")
    assert unknown.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as no_cron:
        client.crons.create("nobody", schedule="0 9 * * *", input={"messages": ["hi"]})
    assert no_cron.value.response.status_code == 404


def assistant_id_of_alpha(client: Any) -> str:
    return str(client.assistants.get("alpha")["assistant_id"])


def test_a_key_limited_to_some_agents_sees_their_assistants_only(sdk: Clients) -> None:
    client = sdk("acme_ag")
    assert [a["graph_id"] for a in client.assistants.search()] == ["beta"]
    assert client.assistants.count() == 1
    with pytest.raises(httpx.HTTPStatusError) as hidden:
        client.assistants.get("alpha")
    assert hidden.value.response.status_code == 404


async def test_store_put_get_search_delete_with_the_async_client(gateway: Gateway) -> None:
    async with get_client(
        url=gateway.url, api_key=None, headers={"Authorization": f"Bearer {KEYS['admin']}"}
    ) as client:
        await _store_round_trip(gateway, client)


async def _store_round_trip(gateway: Gateway, client: Any) -> None:
    space = ["acme-notes", uuid.uuid4().hex[:8]]
    await client.store.put_item(space, "k1", {"title": "one", "tier": 1})
    await client.store.put_item(space, "k2", {"title": "two", "tier": 2})
    await client.store.put_item(space, "k3", {"title": "three", "tier": 2})

    item = await client.store.get_item(space, "k1")
    assert item["namespace"] == space and item["key"] == "k1"
    assert item["value"] == {"title": "one", "tier": 1}
    assert item["created_at"] and item["updated_at"]

    found = await client.store.search_items(space)
    assert [i["key"] for i in found["items"]] == ["k1", "k2", "k3"]
    tier2 = await client.store.search_items(space, filter={"tier": 2}, limit=1, offset=1)
    assert [i["key"] for i in tier2["items"]] == ["k3"]
    # query (semantic search) is ignored: every item the filter keeps is returned.
    assert len((await client.store.search_items(space, query="anything"))["items"]) == 3

    await client.store.delete_item(space, "k1")
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await client.store.get_item(space, "k1")
    assert gone.value.response.status_code == 404
    # The same documents as /v1/store's.
    with gateway.client() as http:
        assert http.get(f"/v1/store/{'.'.join(space)}/k2").json()["value"]["title"] == "two"

    with pytest.raises(httpx.HTTPStatusError) as bad:
        await client.store.put_item(["bad ns"], "k", {"v": 1})
    assert bad.value.response.status_code == 422
    await client.store.put_item([*space, "deep"], "k", {"v": 1})
    listed = await client.store.list_namespaces(prefix=space)
    assert listed["namespaces"] == [space, [*space, "deep"]]
    assert (await client.store.list_namespaces(prefix=space, suffix=["deep"]))["namespaces"] == [
        [*space, "deep"]
    ]
    cut = await client.store.list_namespaces(prefix=space, max_depth=2)
    assert cut["namespaces"] == [space]
    paged = await client.store.list_namespaces(prefix=space, limit=1, offset=1)
    assert paged["namespaces"] == [[*space, "deep"]]
    with pytest.raises(httpx.HTTPStatusError) as too_deep:
        await client.store.list_namespaces(max_depth=0)
    assert too_deep.value.response.status_code == 422


def test_a_tenants_key_reaches_its_namespaces_only(sdk: Clients) -> None:
    tag = uuid.uuid4().hex[:8]
    admin, acme = sdk(), sdk("acme")
    admin.store.put_item(["globex-notes", tag], "secret", {"v": 1})
    acme.store.put_item(["acme-notes", tag], "ours", {"v": 2})
    ours = acme.store.list_namespaces()["namespaces"]
    assert ["acme-notes", tag] in ours and all(n[0].startswith("acme-") for n in ours)
    assert ["globex-notes", tag] in admin.store.list_namespaces(suffix=[tag])["namespaces"]

    assert acme.store.get_item(["acme-notes", tag], "ours")["value"] == {"v": 2}
    with pytest.raises(httpx.HTTPStatusError) as hidden:
        acme.store.get_item(["globex-notes", tag], "secret")
    assert hidden.value.response.status_code == 404
    assert acme.store.search_items(["globex-notes", tag])["items"] == []
    with pytest.raises(httpx.HTTPStatusError) as refused:
        acme.store.put_item(["globex-notes", tag], "mine", {"v": 3})
    assert refused.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as refused:
        acme.store.delete_item(["globex-notes", tag], "secret")
    assert refused.value.response.status_code == 404
    assert admin.store.get_item(["globex-notes", tag], "secret")["value"] == {"v": 1}


def test_crons_create_search_delete(gateway: Gateway, sdk: Clients) -> None:
    client = sdk()
    thread = f"t-{uuid.uuid4().hex[:8]}"
    on_thread = client.crons.create_for_thread(
        thread,
        "alpha",
        schedule="0 9 * * 1-5",
        input={"messages": [{"role": "user", "content": "daily report"}]},
        metadata={"team": "ops"},
    )
    assert on_thread["cron_id"].startswith("sch_") and on_thread["thread_id"] == thread
    assert on_thread["schedule"] == "0 9 * * 1-5" and on_thread["enabled"] is True
    assert on_thread["payload"]["input"]["messages"][0]["content"] == "daily report"
    assert on_thread["metadata"] == {"team": "ops"} and on_thread["next_run_date"]

    stateless = client.crons.create(
        "beta", schedule="*/5 * * * *", input={"messages": [{"type": "human", "content": "tick"}]}
    )
    assert stateless["thread_id"] is None  # each tick's run on a new thread
    with gateway.client() as http:
        kept = http.get(f"/v1/schedules/{stateless['cron_id']}").json()
        assert kept["fresh_sessions"] is True and kept["session_id"] != thread

    mine = client.crons.search(thread_id=thread)
    assert [c["cron_id"] for c in mine] == [on_thread["cron_id"]]
    betas = {c["cron_id"] for c in client.crons.search(assistant_id="beta", limit=100)}
    assert stateless["cron_id"] in betas and on_thread["cron_id"] not in betas

    # With the v1 API, the same schedule.
    with gateway.client() as http:
        shown = http.get(f"/v1/schedules/{on_thread['cron_id']}").json()
        assert shown["session_id"] == thread and shown["message"] == "daily report"

    assert client.crons.count(thread_id=thread) == 1
    assert client.crons.count(metadata={"team": "ops"}, thread_id=thread) == 1
    assert client.crons.search(metadata={"team": "dev"}, thread_id=thread) == []
    paused = client.crons.update(on_thread["cron_id"], enabled=False)
    assert paused["enabled"] is False
    assert client.crons.search(thread_id=thread, enabled=True) == []
    assert client.crons.update(on_thread["cron_id"], enabled=True)["enabled"] is True
    with pytest.raises(httpx.HTTPStatusError) as fixed:
        client.crons.update(on_thread["cron_id"], schedule="* * * * *")
    assert fixed.value.response.status_code == 422

    client.crons.delete(on_thread["cron_id"])
    client.crons.delete(stateless["cron_id"])
    assert client.crons.search(thread_id=thread) == []
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.crons.delete(on_thread["cron_id"])
    assert gone.value.response.status_code == 404


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"schedule": "0 9 * *"}, "body.schedule"),
        ({"input": {"messages": []}}, "body.input"),
        ({"timezone": "Europe/Paris"}, "body.timezone"),
    ],
)
def test_a_bad_cron_is_refused_with_a_422(
    sdk: Clients, kwargs: dict[str, object], field: str
) -> None:
    client = sdk()
    args: dict[str, object] = {
        "assistant_id": "alpha",
        "schedule": "0 9 * * *",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        **kwargs,
    }
    assistant = str(args.pop("assistant_id"))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.crons.create(assistant, **args)
    assert refused.value.response.status_code == 422
    assert refused.value.response.json()["field"] == field


def test_a_tenants_key_sees_its_crons_only(gateway: Gateway, sdk: Clients) -> None:
    admin, acme = sdk(), sdk("acme")
    tag = uuid.uuid4().hex[:8]
    ask = {"input": {"messages": [{"role": "user", "content": "hi"}]}}
    theirs = admin.crons.create_for_thread(f"globex-{tag}", "alpha", schedule="0 9 * * *", **ask)
    ours = acme.crons.create("alpha", schedule="0 9 * * *", **ask)
    assert ours["thread_id"] is None  # a new thread each tick, under the tenant's prefix
    with gateway.client() as http:
        assert http.get(f"/v1/schedules/{ours['cron_id']}").json()["session_id"].startswith("acme-")
    seen = {c["cron_id"] for c in acme.crons.search(limit=1000)}
    assert ours["cron_id"] in seen and theirs["cron_id"] not in seen
    with pytest.raises(httpx.HTTPStatusError) as hidden:
        acme.crons.delete(theirs["cron_id"])
    assert hidden.value.response.status_code == 404
    admin.crons.delete(theirs["cron_id"])
    acme.crons.delete(ours["cron_id"])


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/assistants/search", {"limit": 0}, 422),
        ("POST", "/assistants/search", [], 422),
        ("POST", "/assistants", {}, 422),
        ("GET", "/assistants/nobody/schemas", None, 404),
        ("PUT", "/store/items", {"namespace": [], "key": "k", "value": {}}, 422),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": [1]}, 422),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "bad key", "value": {}}, 422),
        ("GET", "/store/items?namespace=a", None, 422),
        ("GET", "/store/items?namespace=a..b&key=k", None, 422),
        ("DELETE", "/store/items", None, 422),
        ("POST", "/store/items/search", {"namespace_prefix": ["a.b"]}, 422),
        ("POST", "/runs/crons", {"assistant_id": "alpha"}, 422),
        (
            "POST",
            "/threads/bad%20id/runs/crons",
            {"assistant_id": "alpha", "schedule": "* * * * *"},
            422,
        ),
        ("POST", "/runs/crons/search", {"limit": -1}, 422),
        ("DELETE", "/runs/crons/sch_0000000000000000", None, 404),
        ("PATCH", "/runs/crons/sch_0000000000000000", {"enabled": False}, 404),
    ],
)
def test_bad_input_gets_a_clear_4xx(
    gateway: Gateway, method: str, path: str, body: object, status: int
) -> None:
    with gateway.client() as http:
        answer = (
            http.request(method, path, json=body)
            if body is not None
            else http.request(method, path)
        )
    assert answer.status_code == status, answer.text
    assert answer.json()["code"]
