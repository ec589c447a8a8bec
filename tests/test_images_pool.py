"""Images in user messages (issue 15, item 4) on real worker processes, the scripted
model, Redis and SQLite state: a turn's image reaches the model as content parts and
later turns replay it; limits are refused at submit with nothing enqueued; a text-only
model's refusal is classified; ``reactq send --image`` and ``history``; the gateway."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq import ImagePart
from reactq.producer import Producer
from reactq.shared.errors import ImageTooLargeError, InvalidImageError, MessageTooLargeError
from reactq.shared.events import ErrorEvent, FinalEvent, QueuedEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests import image_agents
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import run_cli, running_pool, wait_until

pytestmark = pytest.mark.e2e

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108020000009077"
    "53de0000000c4944415478da63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
URL = "https://example.com/cat.png"


@pytest.fixture(scope="module")
def server() -> ScriptedServer:
    return ScriptedServer(image_agents.describe, refuse_images={image_agents.TEXT_ONLY_MODEL})


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
    server: ScriptedServer,
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("images")
    with running_pool(
        redis_url,
        f"{namespace}-images",
        tmp,
        image_agents.describe,
        agents="tests.image_agents:agents",
        server=server,
        REACTQ_MAX_IMAGE_BYTES="4096",
        REACTQ_MAX_CONTENT_BYTES="16384",
    ) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"img-{uuid.uuid4().hex[:10]}"


def requests_of(server: ScriptedServer, session_text: str) -> list[list[list[dict[str, Any]]]]:
    """The user messages' parts of each request whose newest user message ends with
    ``session_text``."""
    found = []
    for parts in server.content_parts:
        if any(p.get("text", "").endswith(session_text) for p in parts[-1]):
            found.append(parts)
    return found


async def test_an_image_reaches_the_model_as_parts_and_is_replayed(
    producer: Producer, server: ScriptedServer
) -> None:
    s = sid()
    image = ImagePart.from_bytes(PNG, "image/png")
    handle = await producer.submit(
        s, [f"what is this? {s}", image, ImagePart.from_url(URL)], agent="vision"
    )
    final = await handle.result(timeout=30)
    assert (final.status, final.text) == ("completed", f"saw 2 image(s): what is this? {s}")
    (sent,) = requests_of(server, s)
    assert sent[-1] == [
        {"type": "text", "text": f"what is this? {s}"},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
        {"type": "image_url", "image_url": {"url": URL}},
    ]
    events = [e async for e in handle.events()]
    queued = events[0]
    assert isinstance(queued, QueuedEvent)
    assert queued.message == f"what is this? {s}"
    assert queued.images == [f"image/png, {len(PNG)} B", URL]  # never the bytes themselves
    # The next turn replays the first one's parts, in the OpenAI shape.
    again = await producer.submit(s, "and now?", agent="vision")
    assert (await again.result(timeout=30)).text == "text only: and now?"
    request = next(
        r for r in reversed(server.requests) if r["messages"][-1]["content"] == "and now?"
    )
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert users == [sent[-1], "and now?"]
    history = await producer.history(s)
    assert history[0].parts is not None and history[0].parts[1] == image


async def test_limits_are_refused_at_submit_with_nothing_enqueued(producer: Producer) -> None:
    s = sid()
    big = ImagePart.from_bytes(b"\x89PNG" + b"\0" * 5000, "image/png")
    with pytest.raises(ImageTooLargeError, match="REACTQ_MAX_IMAGE_BYTES"):
        await producer.submit(s, ["look", big], agent="vision")
    fine = ImagePart.from_bytes(b"\x89PNG" + b"\0" * 4000, "image/png")
    with pytest.raises(MessageTooLargeError, match="REACTQ_MAX_CONTENT_BYTES"):
        await producer.submit(s, ["look", fine, fine, fine, fine], agent="vision")
    with pytest.raises(InvalidImageError):
        await producer.submit(
            s, ["look", {"type": "image_url", "image_url": {"url": "ftp://x"}}], agent="vision"
        )
    assert await producer.redis.llen(producer.keys.pending(s)) == 0
    assert await producer.bus.read(s) == []


async def test_a_text_only_model_refusing_images_is_classified(producer: Producer) -> None:
    s = sid()
    handle = await producer.submit(s, ["what is this?", ImagePart.from_url(URL)], agent="blind")
    final = await handle.result(timeout=30)
    assert final.status == "error"
    assert final.code == "llm_images_unsupported"
    events = [e async for e in handle.events()]
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.code for e in errors] == ["llm_images_unsupported"]
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    # Text still works with that model.
    plain = await producer.submit(sid(), "hello", agent="blind")
    assert (await plain.result(timeout=30)).text == "text only: hello"


def test_cli_send_image_and_history(pool_env: dict[str, str], tmp_path: Path) -> None:
    s = sid()
    path = tmp_path / "dot.png"
    path.write_bytes(PNG)
    sent = run_cli(
        pool_env,
        "send",
        s,
        "two dots",
        "--agent",
        "vision",
        "--image",
        str(path),
        "--image",
        str(path),
    )
    assert sent.returncode == 0, sent.stderr
    assert "saw 2 image(s): two dots" in sent.stdout
    shown = run_cli(pool_env, "history", s)
    assert shown.returncode == 0, shown.stderr
    label = f"[image: image/png, {len(PNG)} B]"
    assert f"user: two dots {label} {label}" in shown.stdout
    missing = run_cli(
        pool_env, "send", s, "x", "--agent", "vision", "--image", str(tmp_path / "no.png")
    )
    assert missing.returncode != 0 and "no.png" in missing.stderr


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    gw = start_gateway(pool_env, Path(pool_env["REACTQ_TMP"]), None)
    try:
        yield gw
    finally:
        gw.stop()


async def test_the_gateway_accepts_parts(producer: Producer, gateway: Gateway) -> None:
    s = sid()
    body = {
        "message": [
            {"type": "text", "text": "via http"},
            {"type": "image_url", "image_url": {"url": DATA_URL}},
        ],
        "agent": "vision",
    }
    with gateway.client() as client:
        accepted = client.post(f"/v1/sessions/{s}/turns", json=body)
        assert accepted.status_code == 202, accepted.text
        turn_id = accepted.json()["turn_id"]
        too_big = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 8000}}
        refused = client.post(
            f"/v1/sessions/{s}/turns",
            json={**body, "message": [{"type": "text", "text": "x"}, too_big]},
        )
        assert refused.status_code == 413, refused.text
        assert refused.json()["code"] == "image_too_large"
        found: dict[str, Any] = {}

        def ended() -> bool:
            found.update(client.get(f"/v1/turns/{turn_id}").json())
            return found.get("final") is not None

        await wait_until(ended, 30, "the turn's final over HTTP")
        assert found["final_text"] == "saw 1 image(s): via http"
        messages = client.get(f"/v1/sessions/{s}/messages").json()
        assert messages[0]["parts"][1]["image_url"]["url"] == DATA_URL
        schema = client.get("/openapi.json").json()
    turn = schema["components"]["schemas"]["TurnCreate"]["properties"]["message"]
    assert "anyOf" in turn and "ImagePart" in str(turn)
