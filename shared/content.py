"""Content parts of a user message: text and images, in the OpenAI Chat Completions shape.

A message submitted as a list of parts (``TextPart``, ``ImagePart``, plain strings, or
dicts in the OpenAI shape) is stored with its parts and sent to the model as
``content: [{"type": "text", ...}, {"type": "image_url", ...}]``. Image bytes travel as
a ``data:`` URL; an http(s) URL is passed on for the provider to fetch.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from reactq.shared.errors import InvalidImageError

_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,([A-Za-z0-9+/=\s]*)", re.ASCII)


class TextPart(BaseModel):
    """A piece of the message's text."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    """The discriminator."""
    text: str
    """The text."""


class ImageURL(BaseModel):
    """Where an image is: an http(s) URL, or a ``data:image/...;base64,`` URL."""

    model_config = ConfigDict(frozen=True)

    url: str
    """The URL."""
    detail: Literal["auto", "low", "high"] | None = None
    """How closely the model looks (providers that support it); None: theirs."""


class ImagePart(BaseModel):
    """An image of the message, by URL or inline as a data URL."""

    model_config = ConfigDict(frozen=True)

    type: Literal["image_url"] = "image_url"
    """The discriminator."""
    image_url: ImageURL
    """The image's URL."""

    @classmethod
    def from_url(
        cls, url: str, *, detail: Literal["auto", "low", "high"] | None = None
    ) -> ImagePart:
        """An image the provider fetches from an http(s) URL (or a data URL)."""
        return _checked(cls(image_url=ImageURL(url=url, detail=detail)))

    @classmethod
    def from_bytes(
        cls, data: bytes, mime: str, *, detail: Literal["auto", "low", "high"] | None = None
    ) -> ImagePart:
        """An image sent inline: ``data`` of type ``mime`` (``image/png``, ...)."""
        if not mime.startswith("image/"):
            raise InvalidImageError(
                f"{mime!r} is not an image type: use image/png, image/jpeg, ..."
            )
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return cls(image_url=ImageURL(url=url, detail=detail))

    @classmethod
    def from_path(
        cls, path: str | Path, *, detail: Literal["auto", "low", "high"] | None = None
    ) -> ImagePart:
        """An image file sent inline, its type guessed from its name."""
        mime, _ = mimetypes.guess_type(str(path))
        if mime is None or not mime.startswith("image/"):
            raise InvalidImageError(f"{path}: not an image file (by its name: use .png, .jpg, ...)")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InvalidImageError(f"{path}: cannot read it: {exc.strerror}") from None
        return cls.from_bytes(data, mime, detail=detail)

    @property
    def mime(self) -> str | None:
        """The type of an inline image; None for one behind an http(s) URL."""
        found = _DATA_URL.fullmatch(self.image_url.url)
        return found.group(1) if found else None

    @property
    def size(self) -> int | None:
        """The bytes of an inline image; None for one behind an http(s) URL."""
        found = _DATA_URL.fullmatch(self.image_url.url)
        if found is None:
            return None
        encoded = re.sub(r"\s", "", found.group(2))
        return len(encoded) * 3 // 4 - encoded[-2:].count("=")

    def label(self) -> str:
        """How it is shown: ``image/png, 12 KB`` for an inline image, else its URL."""
        if self.mime is None:
            return self.image_url.url
        return f"{self.mime}, {_human(self.size or 0)}"


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
"""One part of a user message."""

_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])


def _human(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _checked(part: ImagePart) -> ImagePart:
    url = part.image_url.url
    if url.startswith("data:"):
        found = _DATA_URL.fullmatch(url)
        if found is None:
            raise InvalidImageError(
                "an inline image must be a data URL data:image/<type>;base64,<data>"
            )
        try:
            base64.b64decode(re.sub(r"\s", "", found.group(2)), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidImageError("the image's data URL is not valid base64") from None
    elif not url.startswith(("http://", "https://")):
        raise InvalidImageError(f"an image URL must be http(s) or a data URL, not {url[:60]!r}")
    return part


def parse_parts(message: Sequence[Any]) -> list[TextPart | ImagePart]:
    """A message's parts from parts, plain strings (text) and OpenAI-shaped dicts;
    raises InvalidImageError for a part that is neither text nor a usable image."""
    raw = [TextPart(text=p) if isinstance(p, str) else p for p in message]
    try:
        parts = _PARTS.validate_python(
            [p.model_dump() if isinstance(p, BaseModel) else p for p in raw]
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InvalidImageError(
            f"content part {where}: {first['msg']} (use text or image_url parts)"
        ) from None
    return [_checked(p) if isinstance(p, ImagePart) else p for p in parts]


def parts_text(parts: Sequence[TextPart | ImagePart]) -> str:
    """The text of a message's parts, joined by newlines."""
    return "\n".join(p.text for p in parts if isinstance(p, TextPart))
