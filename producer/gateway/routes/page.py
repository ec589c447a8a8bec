"""The watch page (``static/``): ``GET /`` serves it, ``factory.py`` mounts its files under
``/static``. It calls the ``/v1`` routes with the key the user types (kept for the tab
only)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from reactq.producer.gateway.scopes import touches_nothing

__all__ = ["STATIC", "router"]

STATIC = Path(__file__).resolve().parents[2] / "static"
"""The page's files (``producer/static``)."""

router = APIRouter(tags=["page"])


@router.get("/", include_in_schema=False, dependencies=[touches_nothing()])
async def page() -> FileResponse:
    """The watch page: send and follow a turn, decide calls, browse sessions."""
    return FileResponse(STATIC / "index.html")
