"""Tools that need a person, on real worker processes: a turn parks (no lease, no
worker slot) until every waiting call is decided, survives its workers, resumes on
whichever worker is free; denials, expiry, racing deciders, cancel, FIFO."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    DecisionConflictError,
    InvalidEditError,
)
from reactq.shared.events import (
    ActionEvent,
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    Event,
    FinalEvent,
    StartedEvent,
)
from reactq.shared.keys import Keys
from reactq.shared.protocol.steps import TurnSteps
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.helpers import WorkerPool, audited_events, last_user_text, wait_until
from tests.test_browser import driver  # noqa: F401 - the fixture registers by import

pytestmark = pytest.mark.e2e

FAST_RECOVERY = {
    "REACTQ_LEASE_TTL_SECONDS": "1.5",
    "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
}


def approvals_script(request: Mapping[str, Any]) -> Reply:
    """``plain``: answer at once. Otherwise call ``pay`` (it needs approval), then
    answer with the result the model read."""
    text = last_user_text(request)
    if text.startswith("plain"):
        return Reply.text(f"plain done: {text}")
    path = text.partition("path=")[2].split()[0]
    messages = request["messages"]
    start = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m["content"] for m in messages[start:] if m["role"] == "tool"]
    if not results:
        return Reply.tool_calls([("pay", {"path": path, "amount": 5})])
    return Reply.text(f"result: {results[-1]}")


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    server = ScriptedServer(approvals_script).start_in_thread()
    yield server
    server.stop()


@pytest.fixture
def make_pool(
    redis_url: str, namespace: str, model: ScriptedServer, tmp_path: Path
) -> Iterator[Callable[..., tuple[WorkerPool, dict[str, str]]]]:
    pools: list[WorkerPool] = []

    def make(count: int = 1, **extra: str) -> tuple[WorkerPool, dict[str, str]]:
        env = {
            "REACTQ_REDIS_URL": redis_url,
            "REACTQ_NAMESPACE": f"{namespace}-a{uuid.uuid4().hex[:6]}",
            "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test-key",
            **FAST_RECOVERY,
            **extra,
        }
        pool = WorkerPool(env, tmp_path, agents="tests.pool_agents:agents")
        pools.append(pool)
        pool.start(count)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], count)
        return pool, env

    yield make
    for pool in pools:
        pool.stop()


@pytest.fixture
async def producers() -> AsyncIterator[Callable[[dict[str, str]], Producer]]:
    made: list[Producer] = []

    def make(env: dict[str, str]) -> Producer:
        made.append(Producer(Settings.from_env(env)))
        return made[-1]

    yield make
    for p in made:
        await p.close()


def sid() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


async def events_of(p: Producer, s: str, turn_id: str) -> list[Event]:
    return [e for e in await p.bus.read(s, after="0") if e.turn_id == turn_id]


async def parked(p: Producer, s: str, turn_id: str, timeout: float = 30) -> ApprovalRequestedEvent:
    """Wait until the turn is parked; its approval_requested event."""

    async def is_parked() -> bool:
        return await p.turn_status(turn_id) is TurnStatus.AWAITING_APPROVAL and any(
            isinstance(e, ApprovalRequestedEvent) for e in await events_of(p, s, turn_id)
        )

    await wait_until(is_parked, timeout, f"turn {turn_id} to park")
    (requested,) = [
        e for e in await events_of(p, s, turn_id) if isinstance(e, ApprovalRequestedEvent)
    ]
    return requested


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_parked_turn_survives_its_workers_and_resumes_when_approved(
    make_pool, producers, tmp_path: Path
) -> None:
    pool, env = make_pool(2)
    p = producers(env)
    s, effects = sid(), tmp_path / "paid.txt"
    handle = await p.submit(s, f"pay path={effects}", agent="durable")
    requested = await parked(p, s, handle.turn_id)
    (call,) = requested.calls
    assert (call["tool"], call["arguments"]) == ("pay", {"path": str(effects), "amount": 5})
    assert requested.expires_at is not None
    # Nobody holds anything while a person thinks: no lease, nothing in flight.
    keys = Keys(env["REACTQ_NAMESPACE"])
    assert not await p.redis.exists(keys.lease(s))
    pending = await p.pending_approvals()
    assert [(a.turn_id, a.call_id, a.tool) for a in pending] == [
        (handle.turn_id, call["call_id"], "pay")
    ]
    assert await p.pending_approvals(s) == pending
    assert lines(effects) == []

    for proc in pool.procs:
        os.kill(proc.pid, signal.SIGKILL)
    for proc in pool.procs:
        proc.wait(10)
    pool.start(1)

    outcome = await p.approve(handle.turn_id, call["call_id"], note="fine", by="alice")
    assert outcome.ready and [d.approved for d in outcome.decided] == [True]
    final = await handle.result(timeout=40)
    assert (final.status, final.text) == ("completed", "result: paid 5")
    assert lines(effects) == ["pay 5 attempt=2 resumed=False"]
    events = await events_of(p, s, handle.turn_id)
    started = [e for e in events if isinstance(e, StartedEvent)]
    assert [(e.attempt, e.resumed_from_step) for e in started] == [(1, None), (2, 0)]
    decided = [e for e in events if isinstance(e, ApprovalDecidedEvent)]
    assert [(e.call_id, e.approved, e.reason, e.by) for e in decided] == [
        (call["call_id"], True, "fine", "alice")
    ]
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    assert [m.role for m in await p.history(s)] == ["user", "assistant", "tool", "assistant"]
    assert await p.pending_approvals() == []
    with pytest.raises(ApprovalClosedError):
        await p.approve(handle.turn_id, call["call_id"])


async def test_an_approval_edits_the_arguments_or_gives_the_result(
    make_pool, producers, tmp_path: Path
) -> None:
    _, env = make_pool(1)
    p = producers(env)
    s, effects = sid(), tmp_path / "paid.txt"
    handle = await p.submit(s, f"pay path={effects}", agent="durable")
    (call,) = (await parked(p, s, handle.turn_id)).calls
    cid = call["call_id"]
    # Refused before anything is recorded: the tool's schema says amount is an integer.
    with pytest.raises(InvalidEditError) as wrong_type:
        await p.approve(handle.turn_id, cid, arguments={"path": str(effects), "amount": "7"})
    assert wrong_type.value.details["path"] == "amount"
    with pytest.raises(InvalidEditError, match="with its approval"):
        await p.decide(handle.turn_id, {cid: False}, arguments={cid: {"amount": 7}})
    with pytest.raises(InvalidEditError, match="JSON object"):
        await p.decide(handle.turn_id, {cid: True}, arguments={cid: [7]})  # type: ignore[dict-item]
    assert [a.call_id for a in await p.pending_approvals(s)] == [cid]

    edited = {"path": str(effects), "amount": 7}
    outcome = await p.approve(handle.turn_id, cid, arguments=edited, by="alice")
    assert outcome.ready and outcome.decided[0].arguments == edited
    final = await handle.result(timeout=30)
    assert final.status == "completed" and final.text.endswith("paid 7"), final.text
    assert "A person changed this call's arguments" in final.text
    assert lines(effects) == ["pay 7 attempt=2 resumed=False"]
    events = await events_of(p, s, handle.turn_id)
    (decided,) = [e for e in events if isinstance(e, ApprovalDecidedEvent)]
    assert (decided.by, decided.arguments) == ("alice", edited)
    # The call as it ran: its action (on the resumed attempt: a waiting call has only
    # its approval_requested before) carries the edited arguments.
    actions = [e for e in events if isinstance(e, ActionEvent)]
    assert [(e.attempt, e.args) for e in actions] == [(2, edited)]
    audited = [e for e in await audited_events(p, handle.turn_id) if e.type == "approval_decided"]
    assert [e.arguments for e in audited] == [edited]

    # A result in place of running the call: the tool never runs.
    s2 = sid()
    second = await p.submit(s2, f"pay path={effects}", agent="durable")
    (call2,) = (await parked(p, s2, second.turn_id)).calls
    await p.complete_tool(second.turn_id, call2["call_id"], "refunded by hand", by="bob")
    assert (await second.result(timeout=30)).text == "result: refunded by hand"
    assert lines(effects) == ["pay 7 attempt=2 resumed=False"]


async def test_denied_expired_raced_and_unknown(make_pool, producers, tmp_path: Path) -> None:
    _, env = make_pool(1, REACTQ_APPROVAL_TIMEOUT_SECONDS="2")
    p = producers(env)
    effects = tmp_path / "paid.txt"

    # Denied: the model reads the reason; the tool never runs.
    s1 = sid()
    denied = await p.submit(s1, f"pay path={effects}", agent="durable")
    (call,) = (await parked(p, s1, denied.turn_id)).calls
    # Two deciders race on one call: exactly one wins.
    results = await asyncio.gather(
        p.deny(denied.turn_id, call["call_id"], reason="too much"),
        p.approve(denied.turn_id, call["call_id"]),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, BaseException)]
    losses = [r for r in results if isinstance(r, BaseException)]
    assert len(wins) == 1 and len(losses) == 1
    assert isinstance(losses[0], DecisionConflictError) and losses[0].code == "decision_conflict"
    final = await denied.result(timeout=30)
    if wins[0].decided[0].approved:
        assert final.text == "result: paid 5"
    else:
        assert final.text == "result: [tool_denied] the call was denied: too much"
        assert lines(effects) == []

    # Unknown turn, unknown call.
    with pytest.raises(ApprovalNotFoundError):
        await p.approve("t_unknown0000", "c1")
    s2 = sid()
    expiring = await p.submit(s2, f"pay path={effects}.2", agent="durable")
    await parked(p, s2, expiring.turn_id)
    with pytest.raises(ApprovalNotFoundError) as unknown:
        await p.deny(expiring.turn_id, "no-such-call")
    assert unknown.value.code == "approval_not_found"

    # Nobody decides: after the timeout the call counts as denied.
    final = await expiring.result(timeout=30)
    assert (final.status, final.text) == (
        "completed",
        "result: [tool_denied] the call was denied: no decision in time",
    )
    decided = [
        e for e in await events_of(p, s2, expiring.turn_id) if isinstance(e, ApprovalDecidedEvent)
    ]
    assert [(e.approved, e.by) for e in decided] == [(False, "reactq:timeout")]
    assert lines(Path(f"{effects}.2")) == []


async def test_cancel_while_waiting_and_fifo_behind_a_waiting_turn(
    make_pool, producers, tmp_path: Path
) -> None:
    _, env = make_pool(1)
    p = producers(env)
    effects = tmp_path / "paid.txt"

    # A second turn queued behind a waiting one runs after it.
    s = sid()
    first = await p.submit(s, f"pay path={effects}", agent="durable")
    (call,) = (await parked(p, s, first.turn_id)).calls
    second = await p.submit(s, "plain behind", agent="durable")
    assert await p.turn_status(second.turn_id) is TurnStatus.QUEUED
    # From blocking code: the same calls on SyncProducer (its own loop, in a thread).
    with SyncProducer(Settings.from_env(env)) as sync:
        waiting = await asyncio.to_thread(sync.pending_approvals, s)
        assert [(a.turn_id, a.call_id) for a in waiting] == [(first.turn_id, call["call_id"])]
        decided = await asyncio.to_thread(sync.decide, first.turn_id, {call["call_id"]: True})
    assert decided.ready
    assert (await first.result(timeout=30)).text == "result: paid 5"
    assert (await second.result(timeout=30)).text == "plain done: plain behind"
    history = [m.content for m in await p.history(s) if m.role == "user"]
    assert history == [f"pay path={effects}", "plain behind"]

    # Cancel while waiting: cancelled, no steps kept, the next turn runs.
    s2 = sid()
    waiting = await p.submit(s2, f"pay path={effects}.c", agent="durable")
    await parked(p, s2, waiting.turn_id)
    # The parked turn's step (the reply with its waiting call) is kept in Redis.
    steps = TurnSteps(p.redis, p.keys, 60)
    kept = await steps.get_checkpoint(s2, waiting.turn_id)
    assert kept is not None and kept.messages[-1].tool_calls[0].name == "pay"
    behind = await p.submit(s2, "plain after cancel", agent="durable")
    result = await p.cancel(waiting.turn_id)
    assert result.outcome == "cancelled"
    final = await waiting.result(timeout=10)
    assert final.status == "cancelled"
    assert (await behind.result(timeout=30)).text == "plain done: plain after cancel"
    events = await events_of(p, s2, waiting.turn_id)
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    assert [m.content for m in await p.history(s2)] == [
        "plain after cancel",
        "plain done: plain after cancel",
    ]
    assert await steps.get_checkpoint(s2, waiting.turn_id) is None  # dropped with it
    assert lines(Path(f"{effects}.c")) == []
    with pytest.raises(ApprovalClosedError):
        await p.approve(waiting.turn_id, "anything")


async def test_http_and_cli_decisions(make_pool, producers, tmp_path: Path) -> None:
    import httpx2

    from tests.gateway_support import start_gateway
    from tests.helpers import run_cli

    _, env = make_pool(1)
    p = producers(env)
    effects = tmp_path / "paid.txt"
    # Named keys: the decider recorded is the key's name, whatever the body claims.
    ops_key = "ops-key-0123456789"
    gateway = start_gateway(
        {**env, "REACTQ_API_KEYS": f"ops:{ops_key},billing:bill-key-0123456789"},
        tmp_path,
        ops_key,
    )
    try:
        with gateway.client() as http:
            s = sid()
            handle = await p.submit(s, f"pay path={effects}", agent="durable")
            (call,) = (await parked(p, s, handle.turn_id)).calls
            info = http.get(f"/v1/turns/{handle.turn_id}").json()
            assert info["status"] == "awaiting_approval"
            assert [(c["call_id"], c["tool"]) for c in info["pending_approvals"]] == [
                (call["call_id"], "pay")
            ]
            missing = http.post(
                f"/v1/turns/{handle.turn_id}/decisions", json={"decisions": {"nope": True}}
            )
            assert missing.status_code == 404, missing.text
            url = f"/v1/turns/{handle.turn_id}/decisions"
            body = {"decisions": {call["call_id"]: True}, "notes": {call["call_id"]: "ok"}}
            accepted = http.post(url, json={**body, "by": "alice"})
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["ready"] is True
            assert accepted.json()["decided"] == [
                {
                    "call_id": call["call_id"],
                    "approved": True,
                    "reason": "ok",
                    "by": "ops for alice",
                    "arguments": None,
                }
            ]
            again = http.post(url, json={"decisions": {call["call_id"]: "changed my mind"}})
            assert again.status_code == 409 and again.json()["code"] == "decision_conflict"
            assert (await handle.result(timeout=30)).text == "result: paid 5"
            assert http.get(f"/v1/turns/{handle.turn_id}").json()["pending_approvals"] == []
            closed = http.post(url, json={"decisions": {call["call_id"]: True}})
            assert closed.status_code == 409, closed.text
        # GatewayClient raises the shared errors.
        from reactq.producer.gateway.client import GatewayClient

        async with GatewayClient(gateway.url, "bill-key-0123456789") as client:
            with pytest.raises(ApprovalClosedError):  # it finished
                await client.decide(handle.turn_id, {call["call_id"]: False})
            s3 = sid()
            third = await p.submit(s3, f"pay path={effects}.gw", agent="durable")
            (call3,) = (await parked(p, s3, third.turn_id)).calls
            made = await client.decide(third.turn_id, {call3["call_id"]: "no thanks"}, by="gc")
            assert made.ready and made.decided[0].by == "billing for gc"
            assert (await third.result(timeout=30)).text == (
                "result: [tool_denied] the call was denied: no thanks"
            )
        # An edit over HTTP: refused by the schema (422, the field), then recorded.
        with gateway.client() as http:
            s4 = sid()
            fourth = await p.submit(s4, f"pay path={effects}.http", agent="durable")
            (call4,) = (await parked(p, s4, fourth.turn_id)).calls
            url = f"/v1/turns/{fourth.turn_id}/decisions"
            bad = {"decisions": {call4["call_id"]: True}, "arguments": {call4["call_id"]: {}}}
            refused = http.post(url, json=bad)
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "invalid_edit"
            assert refused.json()["field"] == f"body.arguments.{call4['call_id']}"
            args4 = {"path": f"{effects}.http", "amount": 11}
            ok = http.post(url, json={**bad, "arguments": {call4["call_id"]: args4}})
            assert ok.status_code == 200, ok.text
            assert ok.json()["decided"][0]["arguments"] == args4
            assert (await fourth.result(timeout=30)).text.endswith("paid 11")
            # A result in place of the call, over HTTP: the tool never runs.
            s6 = sid()
            sixth = await p.submit(s6, f"pay path={effects}.http6", agent="durable")
            (call6,) = (await parked(p, s6, sixth.turn_id)).calls
            given = http.post(
                f"/v1/turns/{sixth.turn_id}/calls/{call6['call_id']}/result",
                json={"result": {"refund": "by hand"}, "by": "desk"},
            )
            assert given.status_code == 200, given.text
            assert given.json()["decided"][0]["by"] == "ops for desk"
            assert (await sixth.result(timeout=30)).text == 'result: {"refund": "by hand"}'
            assert lines(Path(f"{effects}.http6")) == []
            twice = http.post(
                f"/v1/turns/{sixth.turn_id}/calls/{call6['call_id']}/result", json={"result": 1}
            )
            assert twice.status_code == 409, twice.text
    except httpx2.HTTPError:
        print(gateway.logs())
        raise
    finally:
        gateway.stop()

    # The command line: deny with a reason, then approve a finished turn's call.
    s2 = sid()
    denied = await p.submit(s2, f"pay path={effects}.cli", agent="durable")
    (call,) = (await parked(p, s2, denied.turn_id)).calls
    out = run_cli(env, "deny", denied.turn_id, call["call_id"], "--reason", "not today")
    assert out.returncode == 0, out.stderr
    assert "denied; the turn resumes" in out.stdout
    final = await denied.result(timeout=30)
    assert final.text == "result: [tool_denied] the call was denied: not today"
    late = run_cli(env, "approve", denied.turn_id, call["call_id"], "--note", "late")
    assert late.returncode != 0
    assert "decision_conflict" in late.stderr or "approval_closed" in late.stderr

    # approve --args: not JSON is one line and exit 2; then the call runs with them.
    s5 = sid()
    fifth = await p.submit(s5, f"pay path={effects}.cli5", agent="durable")
    (call5,) = (await parked(p, s5, fifth.turn_id)).calls
    bad = run_cli(env, "approve", fifth.turn_id, call5["call_id"], "--args", "{amount: 3}")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("[invalid_edit]"), bad.stderr
    args5 = json.dumps({"path": f"{effects}.cli5", "amount": 3})
    ok = run_cli(env, "approve", fifth.turn_id, call5["call_id"], "--args", args5, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["arguments"] == json.loads(args5)
    assert (await fifth.result(timeout=30)).text.endswith("paid 3")
    assert lines(Path(f"{effects}.cli5")) == ["pay 3 attempt=2 resumed=False"]

    # reactq complete: the call's result from a shell.
    s7 = sid()
    seventh = await p.submit(s7, f"pay path={effects}.cli7", agent="durable")
    (call7,) = (await parked(p, s7, seventh.turn_id)).calls
    done = run_cli(env, "complete", seventh.turn_id, call7["call_id"], "paid at the desk")
    assert done.returncode == 0, done.stderr
    assert "given a result; the turn resumes" in done.stdout
    assert (await seventh.result(timeout=30)).text == "result: paid at the desk"
    assert lines(Path(f"{effects}.cli7")) == []


async def test_rollback_and_interrupt_end_a_waiting_turn(
    make_pool, producers, tmp_path: Path
) -> None:
    _, env = make_pool(1)
    p = producers(env)
    effects = tmp_path / "paid.txt"

    # rollback: the waiting turn is discarded, the new one runs on the state before it.
    s = sid()
    waiting = await p.submit(s, f"pay path={effects}", agent="durable")
    await parked(p, s, waiting.turn_id)
    new = await p.submit(s, "plain instead", agent="durable", strategy="rollback")
    assert (await waiting.result(timeout=30)).status == "cancelled"
    assert (await new.result(timeout=30)).text == "plain done: plain instead"
    assert [m.content for m in await p.history(s) if m.role == "user"] == ["plain instead"]

    # interrupt: the waiting turn's completed steps are kept (none here: the reply
    # whose call waited has no result), closed by the interrupted marker.
    s2 = sid()
    waiting = await p.submit(s2, f"pay path={effects}", agent="durable")
    await parked(p, s2, waiting.turn_id)
    new = await p.submit(s2, "plain on top", agent="durable", strategy="interrupt")
    assert (await waiting.result(timeout=30)).status == "cancelled"
    assert (await new.result(timeout=30)).text == "plain done: plain on top"
    roles = [m.role for m in await p.history(s2)]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert lines(effects) == []
    for turn in (waiting.turn_id, new.turn_id):
        events = await events_of(p, s2, turn)
        assert sum(isinstance(e, FinalEvent) for e in events) == 1


def test_the_page_approves_a_waiting_call(make_pool, driver: Any, tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    from tests.gateway_support import start_gateway
    from tests.test_browser import _wait

    _, env = make_pool(1)
    gateway = start_gateway(env, tmp_path, None, name="page")
    effects = tmp_path / "paid.txt"
    try:
        driver.get(gateway.url + "/")
        for field in ("session", "agent"):
            driver.find_element(By.ID, field).clear()
        driver.find_element(By.ID, "session").send_keys(sid())
        driver.find_element(By.ID, "agent").send_keys("durable")
        driver.find_element(By.ID, "message").send_keys(f"pay path={effects}")
        driver.find_element(By.ID, "send").click()
        approve = _wait(
            driver,
            lambda d: (d.find_elements(By.CSS_SELECTOR, ".ev.approval button.approve") or [None])[
                0
            ],
            "the Approve button",
        )
        assert driver.find_elements(By.CSS_SELECTOR, ".ev.approval button.deny")
        assert "awaiting_approval" in driver.find_element(By.CSS_SELECTOR, ".status").text
        # Edit the arguments in the box, then approve: the call runs with the edit.
        driver.find_element(By.CSS_SELECTOR, ".ev.approval button.edit").click()
        box = driver.find_element(By.CSS_SELECTOR, ".ev.approval textarea.edit-args")
        assert json.loads(box.get_attribute("value"))["amount"] == 5
        box.clear()
        box.send_keys(json.dumps({"path": str(effects), "amount": 8}))
        approve.click()
        _wait(
            driver,
            lambda d: any(
                "paid 8" in e.text for e in d.find_elements(By.CSS_SELECTOR, ".ev.final")
            ),
            "the answer after the approval",
        )
        decided = driver.find_elements(By.CSS_SELECTOR, ".ev.decided")
        assert decided and "by page" in decided[0].text and '"amount":8' in decided[0].text
        assert not driver.find_elements(By.CSS_SELECTOR, ".ev.approval button")
        assert lines(effects) == ["pay 8 attempt=2 resumed=False"]
    finally:
        gateway.stop()
