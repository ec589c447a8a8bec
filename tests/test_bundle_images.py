"""image_info reads real image files' headers; analyze_image asks a vision model (the
scripted server, over HTTP) once per file and question, and only its answer reaches the
agent's conversation, also through real `reactq worker` processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from reactq.bundles.images import ImageError, image_tools
from reactq.producer import Producer
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from reactq.worker.agent.tools import Tool, ToolContext
from tests.code_agents import images_script
from tests.helpers import scripted_pool

CTX = ToolContext(session_id="img-1", turn_id="t_1")


def _save(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 30), "red").save(folder / "red.png", dpi=(300, 300))
    Image.new("RGB", (64, 48), "blue").save(folder / "photo.jpg", dpi=(72, 72))
    Image.new("P", (10, 12)).save(folder / "anim.gif")
    Image.new("L", (7, 5)).save(folder / "grey.bmp")
    Image.new("RGBA", (33, 22)).save(folder / "clear.webp")
    Image.new("CMYK", (5000, 4000)).save(folder / "big.jpg", quality=1)


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, namespace: str) -> Settings:
    _save(tmp_path / "ws" / "img-1")
    return Settings.from_env(
        {},
        workspace_root=str(tmp_path / "ws"),
        redis_url=redis_url,
        namespace=f"{namespace}-img-{uuid.uuid4().hex[:6]}",
        image_max_bytes=200_000,
    )


def _tools(settings: Settings, base_url: str = "http://127.0.0.1:9") -> dict[str, Tool]:
    env = settings.model_copy(update={"openai_base_url": base_url})
    return {t.name: t for t in image_tools(env, model="scripted-vision")}


async def test_image_info_reads_each_format_from_its_header(settings: Settings) -> None:
    tools = _tools(settings)
    assert not tools["image_info"].writes and not tools["analyze_image"].writes
    seen = {
        name: str(await tools["image_info"].call({"path": name}, CTX))
        for name in ("red.png", "photo.jpg", "anim.gif", "grey.bmp", "clear.webp", "big.jpg")
    }
    assert seen["red.png"].startswith("red.png: PNG, 40x30 pixels, colour mode RGB, 300x300 DPI")
    assert seen["photo.jpg"].startswith("photo.jpg: JPEG, 64x48 pixels, colour mode RGB, 72x72 DPI")
    assert "GIF, 10x12 pixels, colour mode P" in seen["anim.gif"]
    assert "BMP, 7x5 pixels, colour mode L" in seen["grey.bmp"]
    assert "WEBP, 33x22 pixels, colour mode RGBA" in seen["clear.webp"]
    assert "JPEG, 5000x4000 pixels, colour mode CMYK" in seen["big.jpg"]


async def test_image_info_refuses_what_is_no_image(settings: Settings) -> None:
    folder = Path(settings.workspace_root) / "img-1"
    (folder / "notes.txt").write_text("not an image")
    (folder / "cut.png").write_bytes((folder / "red.png").read_bytes()[:20])
    tools = _tools(settings)
    for name in ("notes.txt", "cut.png"):
        with pytest.raises(ImageError, match="not an image this tool reads"):
            await tools["image_info"].call({"path": name}, CTX)
    with pytest.raises(Exception, match="absolute"):
        await tools["image_info"].call({"path": "/etc/passwd"}, CTX)


async def test_analyze_image_asks_once_per_file_and_question(settings: Settings) -> None:
    asked: list[Mapping[str, Any]] = []

    def vision(request: Mapping[str, Any]) -> Reply:
        asked.append(request)
        return images_script(request)

    async with ScriptedServer(vision) as server:
        tools = _tools(settings, server.base_url)
        first = await tools["analyze_image"].call(
            {"path": "red.png", "question": "What colour?"}, CTX
        )
        again = await tools["analyze_image"].call(
            {"path": "red.png", "question": "What colour?"}, CTX
        )
        other = await tools["analyze_image"].call(
            {"path": "red.png", "question": "How many shapes?"}, CTX
        )
        # Another worker (another tool set, same Redis) finds the answer too.
        shared = await _tools(settings, server.base_url)["analyze_image"].call(
            {"path": "red.png", "question": "What colour?"}, CTX
        )
    assert first == again == shared == "vision saw an image=True for 'What colour?'"
    assert other == "vision saw an image=True for 'How many shapes?'"
    assert len(asked) == 2
    (part,) = [p for p in asked[0]["messages"][0]["content"] if p["type"] == "image_url"]
    assert part["image_url"]["url"].startswith("data:image/png;base64,")


async def test_analyze_image_checks_the_size_before_reading(settings: Settings) -> None:
    tools = _tools(settings)
    with pytest.raises(ImageError, match=r"over the 200000-byte limit"):
        await tools["analyze_image"].call({"path": "big.jpg", "question": "What is it?"}, CTX)
    with pytest.raises(ImageError, match="the question is empty"):
        await tools["analyze_image"].call({"path": "red.png", "question": " "}, CTX)


@pytest.mark.e2e
async def test_the_image_never_enters_the_conversation_on_a_real_worker(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    requests: list[Mapping[str, Any]] = []

    def model(request: Mapping[str, Any]) -> Reply:
        requests.append(request)
        return images_script(request)

    root = tmp_path / "workspaces"
    with scripted_pool(
        redis_url,
        f"{namespace}-images",
        tmp_path,
        ScriptedServer(model),
        workers=1,
        agents="tests.code_agents:images",
        concurrency=4,
        REACTQ_WORKSPACE_ROOT=str(root),
    ) as (env, _):
        session = f"img-{uuid.uuid4().hex[:8]}"
        _save(root / session)
        async with Producer(Settings.from_env(env)) as producer:
            finals = []
            for _ in range(2):
                handle = await producer.submit(session, "look", agent="images")
                finals.append(await asyncio.wait_for(handle.result(timeout=60), 60))
    for final in finals:
        assert final.status == "completed", final
        assert final.text == "answer: vision saw an image=True for 'What colour is it?'"
    vision = [r for r in requests if r["model"] == "scripted-vision"]
    assert len(vision) == 1  # the second turn's answer came from the memo
    for request in requests:
        if request["model"] != "scripted-vision":
            assert "image_url" not in str(request["messages"])
