"""``image_info`` and ``analyze_image``: images in the session's workspace.

``image_info`` reads dimensions, format, DPI and colour mode from the file's
header alone (Pillow parses headers lazily; it is given at most
``HEADER_BYTES`` of the file, read in a thread), with no model call.

``analyze_image`` sends one image and one question to a vision model and
returns the model's answer as the tool's result: the image itself never enters
the agent's conversation. The file's size is checked by ``stat`` before a byte
is read. Answers are memoized in Redis (every worker of the pool shares them)
under the file's SHA-256, the model and the question, for ``MEMO_SECONDS``.

Pillow is the ``images`` extra: ``pip install 'reactq[images]'``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

from reactq.bundles.workspace import Workspace, Workspaces, settings_for, show, split_path
from reactq.shared.errors import ToolError
from reactq.shared.redis_client import connect
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.base import LLMClient
from reactq.worker.agent.llm.endpoint import LLMEndpoint, openai_client
from reactq.worker.agent.tools import Tool, ToolContext

__all__ = ["HEADER_BYTES", "ImageError", "ImageInfo", "image_tools", "read_image_info"]

log = logging.getLogger("reactq.bundles")

HEADER_BYTES = 512 * 1024
"""The most of a file ``image_info`` reads (a JPEG's EXIF block comes before its size)."""
MEMO_SECONDS = 7 * 24 * 3600
"""How long an ``analyze_image`` answer is remembered."""
FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "BMP": "image/bmp"}
_MIME["WEBP"] = "image/webp"


class ImageError(ToolError):
    """An image tool refused the file or could not get an answer; the message says why."""

    code = "image_error"


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:  # an optional extra: fail this feature alone, naming it
        raise ImportError("the image tools need Pillow: pip install 'reactq[images]'") from None
    return Image


@dataclass(frozen=True)
class ImageInfo:
    """What an image's header says."""

    format: str
    """PNG, JPEG, GIF, BMP or WEBP."""
    width: int
    """Pixels across."""
    height: int
    """Pixels down."""
    mode: str
    """Pillow's colour mode: RGB, RGBA, L (grey), P (palette), CMYK, ..."""
    dpi: tuple[float, float] | None
    """Dots per inch across and down, when the header gives them."""

    def render(self, shown: str, size: int) -> str:
        """One line for the model."""
        dpi = f"{self.dpi[0]:g}x{self.dpi[1]:g} DPI" if self.dpi else "no DPI in the header"
        return (
            f"{shown}: {self.format}, {self.width}x{self.height} pixels, "
            f"colour mode {self.mode}, {dpi}, {size} bytes"
        )


def read_image_info(header: bytes) -> ImageInfo:
    """Parse an image header (the file's first bytes); ImageError when it is none of FORMATS."""
    image_module = _pillow()
    try:
        with warnings.catch_warnings():
            # A huge size is a fact to report here, not a bomb: nothing is decoded.
            warnings.simplefilter("ignore", image_module.DecompressionBombWarning)
            with image_module.open(io.BytesIO(header), formats=FORMATS) as image:
                dpi = image.info.get("dpi")
                if dpi is None and image.info.get("jfif_unit") == 1:
                    dpi = image.info.get("jfif_density")
                return ImageInfo(
                    format=str(image.format),
                    width=int(image.width),
                    height=int(image.height),
                    mode=str(image.mode),
                    # PNG stores dots per metre: 300 DPI reads back as 299.9994.
                    dpi=(round(float(dpi[0]), 1), round(float(dpi[1]), 1)) if dpi else None,
                )
    except image_module.DecompressionBombError as exc:
        raise ImageError(f"the image is too large to describe: {exc}") from None
    except (OSError, SyntaxError, ValueError):
        raise ImageError(f"not an image this tool reads (it reads {', '.join(FORMATS)})") from None


def _header(ws: Workspace, path: str) -> tuple[bytes, int]:
    with ws.open_read(path) as (fd, info):
        return os.pread(fd, HEADER_BYTES, 0), info.st_size


def _info(ws: Workspace, path: str) -> str:
    header, size = _header(ws, path)
    try:
        info = read_image_info(header)
    except ImageError as exc:
        raise ImageError(f"{show(split_path(path))}: {exc}") from None
    return info.render(show(split_path(path)), size)


def _load(ws: Workspace, path: str, max_bytes: int) -> tuple[bytes, ImageInfo]:
    shown = show(split_path(path))
    with ws.open_read(path) as (fd, info):
        if info.st_size > max_bytes:  # before a byte is read
            raise ImageError(
                f"{shown} is {info.st_size} bytes, over the {max_bytes}-byte limit "
                "(REACTQ_IMAGE_MAX_BYTES)"
            )
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(map(len, chunks)) > max_bytes:  # it grew since the stat
                raise ImageError(f"{shown} grew past the {max_bytes}-byte limit while read")
    data = b"".join(chunks)
    try:
        return data, read_image_info(data[:HEADER_BYTES])
    except ImageError as exc:
        raise ImageError(f"{shown}: {exc}") from None


class _Answers:
    """Answers in Redis, keyed by file hash, model and question."""

    def __init__(self, settings: Settings) -> None:
        self.url = settings.redis_url
        self.prefix = f"{settings.namespace}:image_answers"

    def key(self, digest: str, model: str, question: str) -> str:
        asked = hashlib.sha256(f"{model}\0{question.strip()}".encode()).hexdigest()
        return f"{self.prefix}:{digest}:{asked}"

    # A connection per call: a call costs a vision model's answer anyway, and a client
    # kept per event loop would outlive the loops a worker's tests make.
    async def get(self, key: str) -> str | None:
        client = connect(self.url, 1)
        try:
            value = await client.get(key)
        finally:
            await client.aclose()
        return (
            None if value is None else value.decode("utf-8") if isinstance(value, bytes) else value
        )

    async def put(self, key: str, answer: str) -> None:
        client = connect(self.url, 1)
        try:
            await client.set(key, answer.encode("utf-8"), ex=MEMO_SECONDS)
        finally:
            await client.aclose()


def image_tools(
    settings_or_root: Settings | str | os.PathLike[str] | None = None,
    *,
    model: str = "gpt-4o-mini",
    client: LLMClient | None = None,
) -> list[Tool]:
    """``image_info`` and ``analyze_image``, for ``Agent(tools=[...])``.

    ``settings_or_root`` as for ``file_tools`` (its Redis holds the memoized
    answers). ``model`` is the vision model ``analyze_image`` asks, through
    ``client``, by default the openai SDK on ``OPENAI_BASE_URL`` /
    ``OPENAI_API_KEY``.
    """
    _pillow()  # fail at start-up, naming the extra, not at the first call
    settings = settings_for(settings_or_root)
    workspaces = Workspaces(
        settings.workspace_root,
        quota_bytes=settings.workspace_quota_bytes,
        max_inodes=settings.workspace_max_inodes,
    )
    answers = _Answers(settings)
    max_bytes = settings.image_max_bytes

    async def ask(messages: list[dict[str, Any]]) -> str:
        if client is not None:
            response = await client.complete(messages, model=model, tools=None)
            return (response.content or "").strip()
        key = settings.openai_api_key
        endpoint = LLMEndpoint(
            base_url=settings.openai_base_url,
            api_key=key.get_secret_value() if key else None,
            timeout=settings.llm_timeout_seconds,
            max_retries=settings.llm_max_retries,
        )
        own = openai_client(endpoint)
        try:
            response = await own.complete(messages, model=model, tools=None)
        finally:
            await own.aclose()
        return (response.content or "").strip()

    async def image_info(ctx: ToolContext, path: str) -> str:
        """Describe an image file of the workspace from its header (format, width and height
        in pixels, colour mode, DPI): PNG, JPEG, GIF, BMP or WEBP. Does not look at it.

        Args:
            path: The image, relative to the workspace.
        """
        return await asyncio.to_thread(_info, workspaces.for_session(ctx.session_id), path)

    async def analyze_image(ctx: ToolContext, path: str, question: str) -> str:
        """Ask a vision model one question about an image file of the workspace and return
        its answer (what it shows, text in it, a chart's values, ...).

        Args:
            path: The image (PNG, JPEG, GIF, BMP or WEBP), relative to the workspace.
            question: What to find out about it.
        """
        if not question.strip():
            raise ImageError("the question is empty: say what to find out about the image")
        ws = workspaces.for_session(ctx.session_id)
        data, info = await asyncio.to_thread(_load, ws, path, max_bytes)
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        key = answers.key(digest, model, question)
        if (known := await answers.get(key)) is not None:
            return known
        url = f"data:{_MIME[info.format]};base64,{base64.b64encode(data).decode('ascii')}"
        messages: list[dict[str, Any]] = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": question},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ]
        answer = await ask(messages)
        if not answer:
            raise ImageError("the vision model gave no answer")
        await answers.put(key, answer)
        return answer

    return [
        Tool(image_info, name="image_info", read_only=True),
        Tool(analyze_image, name="analyze_image", read_only=True),
    ]
