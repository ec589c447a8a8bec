"""Logging for every reactq process: text or JSON lines, secrets redacted.

``configure_logging(settings)`` installs one handler on the root logger, so the
lines of reactq (``reactq.*``), Celery, uvicorn and the libraries below them all
pass the same redaction and come out in the same format (uvicorn's loggers,
which uvicorn gives handlers of their own, are made to propagate to it; pass
``uvicorn_log_config()`` to uvicorn so it leaves them so). Redaction happens on
the handler, not on a logger: a logger's filters do not see records propagated
from its children, a handler's do.

A query parameter named like a key or a token (``?key=``, ``api_key=``,
``access_token=``) is redacted wherever it shows, uvicorn's access line included.
JSON lines carry no terminal colour codes in any field, and never uvicorn's
``color_message`` (its message again, coloured for a terminal).

Structured fields come from ``extra=`` on a log call (``session_id``,
``turn_id``, ``attempt``, ``duration_s``, ``status``...) and from the log
context (``log_context(session_id=...)``), which follows a task across awaits.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

from reactq.shared.settings import Settings

__all__ = [
    "QUIET_LOGGERS",
    "JsonFormatter",
    "RedactingFilter",
    "configure_logging",
    "log_context",
    "redact_also",
    "secrets_of",
    "unmasked_urls",
    "uvicorn_log_config",
]

REDACTED = "[REDACTED]"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Values that look like credentials wherever they appear, even ones we were not told.
_PATTERNS = [
    # Authorization headers and bearer tokens.
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer|basic)?\s*[^\s'\",}]+"), None),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 " + REDACTED),
    # OpenAI-style provider keys.
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    # A password in a URL: scheme://user:password@host.
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1" + REDACTED + "@"),
    # A query parameter that names a key or a token: ?key=, &api_key=, &access_token=.
    (
        re.compile(
            r"(?i)([?&][A-Za-z0-9_.-]*(?:key|token|secret|password|passwd|auth)=)[^&\s'\"#]+"
        ),
        None,
    ),
    # key=value / "api_key": "value" spellings.
    (
        re.compile(
            r"(?i)(['\"]?(?:api[_-]?key|password|secret|token)['\"]?\s*[:=]\s*['\"]?)"
            r"[^\s'\",}&]+"
        ),
        None,
    ),
]

# What each of _PATTERNS needs to match somewhere in the text: one search that
# finds none of it spares a line the substitutions (most lines, at a turn's pace).
_CANDIDATE = re.compile(
    r"(?i)authorization|bearer|basic|sk-|://|api[_-]?key|password|secret|token|[?&][^=\s]*="
)

# Terminal colour codes (uvicorn's ``color_message``, a library's coloured text): a log
# line is read by machines and in files, where they are noise.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

# Record attributes that only restate the message for a terminal: never written.
_PRESENTATION = frozenset({"color_message"})

# Environment variables whose values are secrets by their name.
_SECRET_ENV = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL)")

# LogRecord attributes that are not ``extra=`` fields.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
    | _PRESENTATION
)

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "reactq_log_context", default=None
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged in this context (task, thread)."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def secrets_of(settings: Settings | None, environ: dict[str, str] | None = None) -> set[str]:
    """Every secret value this process knows: secret settings and secret-named env vars.

    ``environ`` defaults to this process's secret-named variables (``Settings.process_env``).
    """
    found: set[str] = set()
    if settings is not None:
        for key in (settings.openai_api_key, settings.api_key, *settings.api_keys):
            if key is not None:
                found.add(key.get_secret_value())
        for entry in settings.api_keys:
            # ``name:key;scopes``: the key alone is what a request carries.
            head = entry.get_secret_value().strip().partition(";")[0]
            found.add(head.partition(":")[2] or head)
        if settings.flower_auth is not None:
            for pair in settings.flower_auth.get_secret_value().split(","):
                found.add(pair.strip())
                found.add(pair.partition(":")[2].strip())
    env = Settings.process_env(_SECRET_ENV.search) if environ is None else environ
    for name, value in env.items():
        if _SECRET_ENV.search(name):
            found.update(v.strip() for v in value.split(","))
    # Short values would redact ordinary words; they are not keys worth the name.
    return {s for s in found if len(s) >= 6}


def unmasked_urls(settings: Settings | None) -> dict[str, str]:
    """kombu's rendering of each configured URL that has no credentials -> the URL.

    kombu masks the password of a broker URL even when it has none
    (``redis://:**@localhost:6379/0``, in Celery's "Connected to" line), which
    reads as if a password were set: such lines get the URL as it is.
    """
    out: dict[str, str] = {}
    if settings is None:
        return out
    for url in (settings.redis_url, settings.effective_broker_url):
        _, sep, rest = url.partition("://")
        netloc = rest.split("/", 1)[0]
        if sep and netloc and "@" not in netloc:
            # kombu adds the default port and path: match on the host (and port) alone.
            out[f"://:**@{netloc}"] = f"://{netloc}"
    return out


class RedactingFilter(logging.Filter):
    """Replaces known secrets and credential-shaped text in a record, message and args.

    ``unmask`` maps text to what it should read (``unmasked_urls``), applied first.
    """

    def __init__(self, secrets: Iterable[str] = (), unmask: dict[str, str] | None = None) -> None:
        super().__init__()
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = sorted(set(secrets), key=len, reverse=True)
        self.unmask = dict(unmask or {})

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Redact these values too (from now on)."""
        self.secrets = sorted(set(self.secrets) | set(secrets), key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret and credential-shaped value replaced."""
        for masked, plain in self.unmask.items():
            text = text.replace(masked, plain)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if not _CANDIDATE.search(text):
            return text
        for pattern, repl in _PATTERNS:
            if repl is None:
                text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
            else:
                text = pattern.sub(repl, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        # Format once, here, so a secret hidden in an argument is caught too.
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self.redact(value))
        return True


class ContextFilter(logging.Filter):
    """Copies the log context's fields onto each record (``extra=`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(_plain(out), default=lambda o: _plain(str(o)), ensure_ascii=False)


def _plain(value: Any) -> Any:
    """``value`` with terminal colour codes taken out of every string in it."""
    if isinstance(value, str):
        return _ANSI.sub("", value) if "\x1b" in value else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _TextFormatter(logging.Formatter):
    """The classic line, plus the context's fields as ``key=value`` at the end, without
    terminal colour codes."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in _STANDARD and not k.startswith("_") and f"{v}" not in record.getMessage()
        ]
        line = f"{line} [{' '.join(fields)}]" if fields else line
        # A file or a collector gets the codes a library coloured its text with as
        # noise, and a terminal needs none to read a log line.
        return _ANSI.sub("", line) if "\x1b" in line else line


_HANDLER_MARK = "_reactq_handler"


def redact_also(*secrets: str) -> None:
    """Add secrets found after logging was configured (an agent's key, read from a
    variable of any name; a header value) to the redaction of reactq's handler."""
    found = [s for s in secrets if len(s) >= 6]  # as secrets_of: short ones are words
    if not found:
        return
    for handler in logging.getLogger().handlers:
        if getattr(handler, _HANDLER_MARK, False):
            for f in handler.filters:
                if isinstance(f, RedactingFilter):
                    f.add_secrets(found)


# Libraries that log at INFO what reactq's own lines say better, or what a person
# need not read on every turn; at DEBUG they speak again.
QUIET_LOGGERS = (
    "alembic",  # a line per migration step, on every start (the "ready" line names the db)
    "httpx",
    "httpx2",
    "httpcore",
    "openai",  # a line per request to the model
    "celery.worker.strategy",  # "Task received", with its whole payload
    "celery.app.trace",  # "Task succeeded", with its payload (a failure is still an ERROR)
)

# Loggers that servers configure with handlers of their own (and propagate=False),
# which would write past reactq's redaction and format.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's ``log_config``: its loggers without handlers of their own, propagating
    to the root logger, where ``configure_logging`` put reactq's handler.

    Without it uvicorn installs its own handlers: plain text, not redacted (an
    access line carries the query string), tracebacks outside the JSON.
    """
    return {
        "version": 1,
        # Leave every other logger as configure_logging left it.
        "disable_existing_loggers": False,
        "loggers": {name: {"handlers": [], "propagate": True} for name in SERVER_LOGGERS},
    }


def configure_logging(
    settings: Settings | None = None,
    level: str | None = None,
    *,
    fmt: str | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Install reactq's handler on the root logger (replacing a previous one of ours).

    ``level`` (e.g. a ``--loglevel``) wins over ``REACTQ_LOG_LEVEL``; ``fmt``
    (``text``/``json``) over ``REACTQ_LOG_FORMAT``.
    """
    level = (level or (settings.log_level if settings else "INFO")).upper()
    fmt = fmt or (settings.log_format if settings else "text")
    handler = logging.StreamHandler(stream or sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactingFilter(secrets_of(settings), unmasked_urls(settings)))
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    quiet = logging.WARNING if logging.getLevelName(level) != logging.DEBUG else logging.NOTSET
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
    # A server that configured its loggers first (``uvicorn module:app`` does, before
    # importing the app) would keep writing past this handler.
    for name in SERVER_LOGGERS:
        server_logger = logging.getLogger(name)
        for old in list(server_logger.handlers):
            server_logger.removeHandler(old)
        server_logger.propagate = True
    return handler
