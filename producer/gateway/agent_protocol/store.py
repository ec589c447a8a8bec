"""The Agent Protocol's store (see the package's docstring)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(tags=["agent-protocol"])
