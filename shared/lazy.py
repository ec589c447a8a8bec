"""Lazy re-exports (PEP 562): a package's public names, imported on first use.

A package that re-exports names from its modules keeps a table of them here
instead of importing them eagerly, so importing the package (or any module
inside it) costs nothing until a name is used; ``from pkg import Name`` works as
before. The package repeats the imports under ``typing.TYPE_CHECKING`` so that
type checkers and editors see them (tests/test_lazy_imports.py checks that the
two agree).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


class LazyExports:
    """The names ``package`` re-exports: ``modules`` maps each module to the names
    imported from it, separated by whitespace.

    Its ``getattr`` and ``dir`` are the package's module-level ``__getattr__`` and
    ``__dir__``: a name is imported the first time it is looked up and then cached
    in the package's namespace, where later lookups find it without this class.
    """

    def __init__(self, package: str, modules: Mapping[str, str]) -> None:
        self.package = package
        self.where: dict[str, str] = {
            name: module for module, names in modules.items() for name in names.split()
        }

    def getattr(self, name: str) -> Any:
        """The value of ``package.name``, imported now; AttributeError when it has none."""
        module = self.where.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        vars(sys.modules[self.package])[name] = value
        return value

    def dir(self) -> list[str]:
        """What ``dir(package)`` lists: what it holds now and every lazy name."""
        return sorted(set(vars(sys.modules[self.package])) | set(self.where))
