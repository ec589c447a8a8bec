"""Issue 20, item 3, on a real worker, a real gateway and SQLite state: sessions you
can list, show, tag and delete, a session's turns, and branches (fork, switch,
list, truncate) through the Producer, the SyncProducer, HTTP and the CLI."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.errors import SessionBusyError, SessionNotFoundError
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import run_cli, running_pool, sleepy_lookup, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("sessions-api")
    with running_pool(
        redis_url,
        f"{namespace}-sa",
        tmp,
        sleepy_lookup,
        REACTQ_WORKSPACE_ROOT=str(tmp / "workspaces"),
    ) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    gw = start_gateway(pool_env, Path(pool_env["REACTQ_TMP"]), None)
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"sa-{uuid.uuid4().hex[:10]}"


async def completed(producer: Producer, session_id: str, message: str) -> str:
    handle = await producer.submit(session_id, message, agent="e2e")
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    return handle.turn_id


async def test_list_show_and_tag_sessions(
    producer: Producer, gateway: Gateway, pool_env: dict[str, str]
) -> None:
    a, b = sid(), sid()
    await completed(producer, a, "first of a")
    second = await completed(producer, a, "second of a")
    await completed(producer, b, "first of b")

    # Producer: newest first, and a cursor that pages.
    page = await producer.list_sessions(agent="e2e", limit=1)
    assert [s.session_id for s in page.sessions] == [b] and page.next_cursor
    page = await producer.list_sessions(agent="e2e", limit=1, cursor=page.next_cursor)
    assert [s.session_id for s in page.sessions] == [a]

    show = await producer.get_session(a)
    assert show is not None
    assert (show.agent, show.active_branch, show.message_count, show.turns) == (
        "e2e",
        "trunk",
        8,
        2,
    )
    assert show.last_turn is not None and show.last_turn.turn_id == second
    assert show.last_turn.status == "completed" and show.usage["total_tokens"] > 0
    assert await producer.get_session(sid()) is None

    # Metadata: a merge, then a filter.
    assert await producer.update_session_metadata(a, {"user": "u-1", "plan": "pro"}) == {
        "user": "u-1",
        "plan": "pro",
    }
    with gateway.client() as client:
        patched = client.patch(f"/v1/sessions/{a}", json={"metadata": {"plan": None}})
        assert patched.status_code == 200, patched.text
        assert patched.json()["metadata"] == {"user": "u-1"}
        shown = client.get(f"/v1/sessions/{a}").json()
        assert shown["message_count"] == 8 and shown["turns"] == 2
        assert shown["last_turn"]["turn_id"] == second
        listed = client.get("/v1/sessions", params={"agent": "e2e", "metadata": "user=u-1"})
        assert listed.status_code == 200, listed.text
        assert [s["session_id"] for s in listed.json()["sessions"]] == [a]
        pages = client.get("/v1/sessions", params={"agent": "e2e", "limit": 1}).json()
        assert [s["session_id"] for s in pages["sessions"]] == [b]
        nxt = client.get(
            "/v1/sessions", params={"agent": "e2e", "limit": 1, "cursor": pages["next_cursor"]}
        ).json()
        assert nxt["sessions"][0]["session_id"] == a
        since = client.get("/v1/sessions", params={"updated_since": shown["updated_at"] + 3600})
        assert since.json() == {"sessions": [], "next_cursor": None}

        missing = client.get(f"/v1/sessions/{sid()}")
        assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
        bad = client.get("/v1/sessions", params={"cursor": "nonsense"})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_cursor"
        bad = client.get("/v1/sessions", params={"metadata": "[1]"})
        assert bad.status_code == 422 and bad.json()["field"].startswith("query.metadata")
        bad = client.get("/v1/sessions", params={"agnet": "e2e"})
        assert bad.status_code == 422 and bad.json()["field"] == "query.agnet"
        bad = client.patch(f"/v1/sessions/{sid()}", json={"metadata": {"x": 1}})
        assert bad.status_code == 404 and bad.json()["code"] == "session_not_found"

    with SyncProducer(Settings.from_env(pool_env)) as sync:
        assert [s.session_id for s in sync.list_sessions(metadata={"user": "u-1"}).sessions] == [a]
        got = sync.get_session(a)
        assert got is not None and got.metadata == {"user": "u-1"}
        assert sync.update_session_metadata(a, {"user": None}) == {}

    env = {**pool_env}
    ls = run_cli(env, "sessions", "ls", "--agent", "e2e", "--json")
    assert ls.returncode == 0, ls.stderr
    assert [json.loads(line)["session_id"] for line in ls.stdout.splitlines()][:2] == [b, a]
    show_cli = run_cli(env, "sessions", "show", a)
    assert show_cli.returncode == 0, show_cli.stderr
    assert "e2e" in show_cli.stdout and "8 messages" in show_cli.stdout
    unknown = run_cli(env, "sessions", "show", sid())
    assert unknown.returncode == 2 and "[session_not_found]" in unknown.stderr


async def test_a_sessions_turns(
    producer: Producer, gateway: Gateway, pool_env: dict[str, str]
) -> None:
    s = sid()
    first = await producer.submit(s, "sleep=1 first", agent="e2e")
    queued = await producer.submit(s, "second", agent="e2e")
    assert (await producer.cancel(queued.turn_id)).outcome == "cancelled"
    await first.result(timeout=30)
    last = await completed(producer, s, "third")

    turns = await producer.session_turns(s)
    assert [(t.turn_id, t.status, t.attempt) for t in turns] == [
        (first.turn_id, "completed", 1),
        (queued.turn_id, "cancelled", 0),
        (last, "completed", 1),
    ]
    done = turns[0]
    assert done.usage["total_tokens"] > 0
    assert done.submitted_at is not None and done.started_at is not None
    assert done.ended_at is not None and done.submitted_at <= done.started_at <= done.ended_at

    with gateway.client() as client:
        body = client.get(f"/v1/sessions/{s}/turns")
        assert body.status_code == 200, body.text
        assert [t["turn_id"] for t in body.json()] == [first.turn_id, queued.turn_id, last]
        assert body.json()[0] == turns[0].model_dump(mode="json")
        missing = client.get(f"/v1/sessions/{sid()}/turns")
        assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"

    with SyncProducer(Settings.from_env(pool_env)) as sync:
        assert [t.turn_id for t in sync.session_turns(s)] == [first.turn_id, queued.turn_id, last]

    cli = run_cli(pool_env, "turns", s)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [first.turn_id, queued.turn_id, last]
    assert "cancelled" in lines[1] and "completed" in lines[0]


async def test_branches_over_http_sync_and_the_cli(
    producer: Producer, gateway: Gateway, pool_env: dict[str, str]
) -> None:
    s = sid()
    await completed(producer, s, "one")
    await completed(producer, s, "two")  # 8 messages on the trunk

    with gateway.client() as client:
        forked = client.post(
            f"/v1/sessions/{s}/branches", json={"from_sequence": 4, "name": "edit"}
        )
        assert forked.status_code == 201, forked.text
        assert forked.json() == {
            "branch_id": "edit",
            "parent_branch_id": "trunk",
            "fork_sequence": 4,
            "length": 4,
            "active": True,
            "created_at": forked.json()["created_at"],
        }
        listed = client.get(f"/v1/sessions/{s}/branches").json()
        assert [(b["branch_id"], b["length"], b["active"]) for b in listed] == [
            ("trunk", 8, False),
            ("edit", 4, True),
        ]
        switched = client.put(f"/v1/sessions/{s}/active_branch", json={"branch": "trunk"})
        assert switched.status_code == 200, switched.text
        assert switched.json()["active_branch"] == "trunk"
        cut = client.post(f"/v1/sessions/{s}/truncate", json={"after": 6})
        assert cut.status_code == 200, cut.text
        assert (cut.json()["branch_id"], cut.json()["length"]) == ("trunk", 6)

        refused = client.post(f"/v1/sessions/{s}/branches", json={"from_sequence": 99})
        assert refused.status_code == 422 and refused.json()["code"] == "branch_error"
        taken = client.post(f"/v1/sessions/{s}/branches", json={"from_sequence": 1, "name": "edit"})
        assert taken.status_code == 409 and taken.json()["code"] == "branch_error"
        nobranch = client.put(f"/v1/sessions/{s}/active_branch", json={"branch": "nope"})
        assert nobranch.status_code == 404 and nobranch.json()["code"] == "branch_not_found"
        nosession = client.get(f"/v1/sessions/{sid()}/branches")
        assert nosession.status_code == 404 and nosession.json()["code"] == "session_not_found"

    with SyncProducer(Settings.from_env(pool_env)) as sync:
        branch = sync.fork(s, 2, new_branch="side", activate=False)
        assert branch == "side"
        assert [b.branch_id for b in sync.branches(s)] == ["trunk", "edit", "side"]
        sync.switch_branch(s, "side")
        assert len(sync.history(s)) == 2
        sync.truncate(s, 1)  # the active branch's messages are all inherited: they stay
        assert len(sync.history(s)) == 2
        sync.truncate(s, 5, branch="trunk")
        assert len(sync.history(s, branch="trunk")) == 5

    cli = run_cli(pool_env, "truncate", s, "4", "--branch", "trunk")
    assert cli.returncode == 0, cli.stderr
    assert [len(await producer.history(s, branch="trunk"))] == [4]
    # A branch forked inside the cut tail keeps its history.
    assert len(await producer.history(s, branch="edit")) == 4


async def test_delete_refused_while_a_turn_runs_unless_forced(
    producer: Producer, gateway: Gateway, pool_env: dict[str, str]
) -> None:
    s = sid()
    await completed(producer, s, "before")
    workspace = Path(pool_env["REACTQ_TMP"]) / "workspaces" / s
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.txt").write_text("kept until the session goes")
    await producer.update_session_metadata(s, {"user": "u-9"})

    running = await producer.submit(s, "sleep=3 long", agent="e2e")
    waiting = await producer.submit(s, "after the long one", agent="e2e")
    await wait_until(
        lambda: _is_running(producer, running.turn_id), 10, "the long turn to be running"
    )

    with gateway.client() as client:
        busy = client.delete(f"/v1/sessions/{s}")
        assert busy.status_code == 409 and busy.json()["code"] == "session_busy"
    with pytest.raises(SessionBusyError):
        await producer.delete_session(s)
    assert await producer.get_session(s) is not None

    with gateway.client(timeout=60) as client:
        forced = client.delete(f"/v1/sessions/{s}", params={"force": "true"})
    assert forced.status_code == 200, forced.text
    body = forced.json()
    assert body["session_id"] == s and body["state_deleted"] and body["workspace_deleted"]
    assert set(body["cancelled"]) == {running.turn_id, waiting.turn_id}

    # The running turn was cancelled through the cancel path; its final says so.
    assert (await producer.turn_events(running.turn_id))[-1].status == "cancelled"  # type: ignore[union-attr]
    assert await producer.get_session(s) is None
    assert await producer.history(s) == []
    assert not workspace.exists()
    keys = producer.keys
    for key in (keys.events(s), keys.pending(s), keys.running(s), keys.meta(s), keys.turns(s)):
        assert not await producer.redis.exists(key), key
    assert not await producer.redis.exists(keys.turn_index(running.turn_id))
    with gateway.client() as client:
        gone = client.delete(f"/v1/sessions/{s}")
        assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    with pytest.raises(SessionNotFoundError):
        await producer.delete_session(s)

    # The id starts afresh.
    await completed(producer, s, "again")
    assert len(await producer.history(s)) == 4


async def test_delete_an_idle_session_from_sync_and_the_cli(
    producer: Producer, pool_env: dict[str, str]
) -> None:
    a, b = sid(), sid()
    await completed(producer, a, "a")
    await completed(producer, b, "b")
    with SyncProducer(Settings.from_env(pool_env)) as sync:
        deleted = sync.delete_session(a)
        assert deleted.state_deleted and deleted.cancelled == []
        assert sync.get_session(a) is None
    rm = run_cli(pool_env, "sessions", "rm", b)
    assert rm.returncode == 0, rm.stderr
    assert await producer.get_session(b) is None
    again = run_cli(pool_env, "sessions", "rm", b)
    assert again.returncode == 2 and "[session_not_found]" in again.stderr


async def _is_running(producer: Producer, turn_id: str) -> bool:
    return await producer.turn_status(turn_id) == "running"
