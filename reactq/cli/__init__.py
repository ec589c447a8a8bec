"""The ``reactq`` command: the one package that imports both sides.

``reactq.producer`` and ``reactq.worker`` never import each other
(docs/architecture.md, "Layers"); this package wires the producer-side commands
(send, watch, history, cancel, the state commands) and the worker-side ones
(worker, run, demo) into one parser.

``parser`` (and ``parser_state``) declare every subcommand and import nothing heavy;
each top-level command names the table holding its handler, and ``main`` imports
that module (``turns``, ``local`` or a ``reactq.producer.cli_*`` module) only when
the command runs, so ``reactq --help`` answers without loading Celery, SQLAlchemy,
openai or the ``Producer``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
import traceback
from collections.abc import Sequence

from reactq.cli.parser import build_parser
from reactq.shared.errors import ReactqError, ServiceUnavailableError
from reactq.shared.extras import missing_extra

__all__ = ["EXIT_ERROR", "EXIT_UNAVAILABLE", "build_parser", "main"]

EXIT_ERROR = 2
"""A refused command: bad input, an unknown agent or session, a bad setting."""
EXIT_UNAVAILABLE = 3
"""Redis, the broker or the state database could not be used (worth a retry)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reactq`` console script."""
    args = build_parser().parse_args(argv)
    try:
        module, _, table = args.handlers.partition(":")
        handler = getattr(importlib.import_module(module), table)[args.command]
        if inspect.iscoroutinefunction(handler):
            code = asyncio.run(handler(args))
        else:
            code = handler(args)
    except ReactqError as exc:
        return _fail(exc, args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `reactq watch ... | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        # Redis, the broker or the database failing is one line like any other error;
        # anything else is a bug and keeps its traceback.
        error = _as_service_error(exc)
        if error is None:
            raise
        return _fail(error, args)
    return int(code)


def _as_service_error(exc: BaseException) -> ReactqError | None:
    # Imported on a failure only: reading the drivers' exceptions loads kombu and
    # SQLAlchemy, which `reactq --help` has no use for.
    missing = missing_extra(exc)
    if missing is not None:
        return missing
    from reactq.shared.services import service_error
    from reactq.shared.settings import Settings

    try:
        settings = Settings.from_env()
    except ReactqError:
        return None
    return service_error(exc, settings)


def _fail(error: ReactqError, args: argparse.Namespace) -> int:
    """Print ``error`` on stderr (JSON under ``--json``); its exit code.

    Under ``--loglevel DEBUG`` the traceback of what caused it (a bug in an agent
    module, a driver's error) comes first."""
    cause = error.__cause__
    if cause is not None and str(getattr(args, "loglevel", None) or "").upper() == "DEBUG":
        traceback.print_exception(cause, file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"code": error.code, "message": error.message}), file=sys.stderr)
    else:
        print(f"reactq: error: {error.message} [{error.code}]", file=sys.stderr)
    return EXIT_UNAVAILABLE if isinstance(error, ServiceUnavailableError) else EXIT_ERROR
