"""Images in user messages (issue 15, item 4): the content parts, their OpenAI shape and
limits, and the StateStore contract for them on every backend (memory, SQLite,
PostgreSQL, Redis): stored, read back, kept by a fork."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from reactq import ChatMessage, ImagePart, TextPart
from reactq.shared.content import parse_parts
from reactq.shared.errors import (
    EmptyMessageError,
    ImageTooLargeError,
    InvalidImageError,
    MessageTooLargeError,
)
from reactq.shared.state import StateStore
from reactq.shared.turns import check_message
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    record,
    sid,
    store_fixture,
    url_fixture,
)

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108020000009077"
    "53de0000000c4944415478da63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
URL = "https://example.com/cat.png"


def test_parts_take_the_openai_shape() -> None:
    image = ImagePart.from_bytes(PNG, "image/png")
    assert image.model_dump(exclude_none=True) == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
    }
    assert (image.mime, image.size) == ("image/png", len(PNG))
    assert ImagePart.from_url(URL, detail="low").model_dump(exclude_none=True) == {
        "type": "image_url",
        "image_url": {"url": URL, "detail": "low"},
    }
    assert TextPart(text="hi").model_dump() == {"type": "text", "text": "hi"}
    # Plain strings and dicts in the OpenAI shape are parts too.
    parts = parse_parts(["look", {"type": "image_url", "image_url": {"url": URL}}])
    assert parts == [TextPart(text="look"), ImagePart.from_url(URL)]


def test_from_path_guesses_the_type(tmp_path: Path) -> None:
    path = tmp_path / "dot.png"
    path.write_bytes(PNG)
    image = ImagePart.from_path(path)
    assert (image.mime, image.size) == ("image/png", len(PNG))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InvalidImageError, match=r"notes\.txt"):
        ImagePart.from_path(tmp_path / "notes.txt")


def test_a_message_with_parts_goes_to_the_model_as_content_parts() -> None:
    image = ImagePart.from_url(URL)
    text, parts = check_message(["what is this?", image], 1000, 100, 10_000)
    assert text == "what is this?"
    message = ChatMessage(role="user", content=text, parts=parts)
    assert message.to_openai() == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": URL}},
        ],
    }
    # A plain string is what it always was.
    assert check_message("hi", 1000, 100, 10_000) == ("hi", None)


def test_limits_and_bad_parts_are_refused_clearly() -> None:
    big = ImagePart.from_bytes(b"\0" * 2000, "image/png")
    with pytest.raises(ImageTooLargeError, match="REACTQ_MAX_IMAGE_BYTES") as caught:
        check_message(["x", big], 1000, 1000, 100_000)
    assert caught.value.code == "image_too_large"
    with pytest.raises(MessageTooLargeError, match="REACTQ_MAX_CONTENT_BYTES"):
        check_message(["x", big, big], 1000, 5000, 4000)
    with pytest.raises(InvalidImageError, match="data URL"):
        parse_parts([{"type": "image_url", "image_url": {"url": "data:image/png,nobase64"}}])
    with pytest.raises(InvalidImageError, match="http"):
        parse_parts([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}])
    with pytest.raises(InvalidImageError, match="image/"):
        ImagePart.from_bytes(b"abc", "text/plain")
    with pytest.raises(InvalidImageError, match="part"):
        parse_parts([{"type": "audio", "audio": {}}])
    with pytest.raises(EmptyMessageError):
        check_message([], 1000, 1000, 1000)
    with pytest.raises(EmptyMessageError):
        check_message(["  "], 1000, 1000, 1000)


async def test_images_round_trip_through_the_store_and_a_fork(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    parts: list[TextPart | ImagePart] = [
        TextPart(text="two pictures"),
        ImagePart.from_bytes(PNG, "image/png"),
        ImagePart.from_url(URL, detail="high"),
    ]
    asked = ChatMessage(role="user", content="two pictures", parts=parts)
    answer = ChatMessage(role="assistant", content="a red dot and a cat")
    await store.commit_turn(s, [asked, answer], record(s, "t_images1"))
    got = await store.get_messages(s)
    assert got[0].parts == parts and got[0].content == "two pictures"
    assert got[1].parts is None
    assert got[0].to_openai()["content"][1]["image_url"]["url"].startswith("data:image/png;")
    branch = await store.fork(s, from_sequence=1)
    forked = await store.get_messages(s, branch)
    assert [m.parts for m in forked] == [parts]
