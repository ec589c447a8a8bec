"""The services reactq depends on, and what a person reads when one fails.

Redis (``REACTQ_REDIS_URL``), the broker (``REACTQ_BROKER_URL``, defaulting to
Redis) and the state database (``REACTQ_DATABASE_URL``) are reached through
four client libraries, each with exceptions of its own, several layers deep.
``service_error`` recognises their connection failures and turns one into a
``ServiceUnavailableError`` that says what failed, at which URL (its password
redacted) and which setting to change; the ``reactq`` command prints it as its
usual one line. Anything it does not recognise stays what it was: a bug keeps
its traceback.

``probe_redis`` and ``probe_broker`` are a quick check a long-running command
(``reactq worker``) makes before it starts, so that a wrong URL fails at once
rather than in a retry loop. Once running, the clients retry as they always do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

import amqp.exceptions
import kombu
import kombu.exceptions
import redis as redis_sync
import redis.exceptions as redis_errors
import sqlalchemy.exc

from reactq.shared.errors import ConfigError, ReactqError, ServiceUnavailableError
from reactq.shared.logs import RedactingFilter
from reactq.shared.redis_urls import is_cluster_url, node_url
from reactq.shared.settings import Settings
from reactq.shared.state.backends import BACKENDS

__all__ = [
    "Service",
    "no_such_database",
    "probe_broker",
    "probe_redis",
    "redact_url",
    "service_error",
    "unavailable",
]

PROBE_TIMEOUT_SECONDS = 3  # an int: kombu's connect_timeout is typed by its default (5)

# PostgreSQL SQLSTATE classes of a database that cannot be used at all: connection
# exceptions, bad credentials, no such database, too many connections, starting up.
_PG_AUTH = ("28",)
_PG_MISSING = ("3D",)
_PG_DOWN = ("08", "53", "57P0")


@dataclass(frozen=True)
class Service:
    """One external service: what to call it, its URL and the setting naming it."""

    name: str
    """``redis``, ``broker`` or ``database`` (the error's ``service`` detail)."""
    label: str
    """How a sentence names it: ``Redis``, ``the broker``, ``the state database``."""
    url: str
    setting: str
    """The variable to change (and, for an unset broker, where its value came from)."""

    @classmethod
    def redis(cls, settings: Settings) -> Service:
        """Redis: events, leases, session queues."""
        return cls("redis", "Redis", settings.redis_url, "REACTQ_REDIS_URL")

    @classmethod
    def broker(cls, settings: Settings) -> Service:
        """The Celery broker."""
        setting = "REACTQ_BROKER_URL"
        if settings.broker_url is None:
            setting += " (unset: the broker is REACTQ_REDIS_URL's)"
        return cls("broker", "the broker", settings.effective_broker_url, setting)

    @classmethod
    def database(cls, settings: Settings) -> Service:
        """The state database."""
        return cls("database", "the state database", settings.database_url, "REACTQ_DATABASE_URL")


def redact_url(url: str) -> str:
    """``url`` with its password replaced, as the logs print it."""
    return RedactingFilter().redact(url)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it, outermost first (each once)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        orig = getattr(current, "orig", None)  # SQLAlchemy keeps the driver's error here
        if isinstance(orig, BaseException):
            todo.append(orig)


def _sqlstate(exc: BaseException) -> str | None:
    for link in _chain(exc):
        state = getattr(link, "sqlstate", None)
        if isinstance(state, str) and state:
            return state
    return None


def _from_code(tb: TracebackType | None, frames: tuple[str, ...]) -> bool:
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if any(part in name for part in frames):
            return True
        tb = tb.tb_next
    return False


def _no_such_db(exc: BaseException) -> bool:
    """Redis answered, but has no database of the URL's number (``/99`` of 16)."""
    return isinstance(exc, redis_errors.ResponseError) and "DB index is out of range" in str(exc)


def _kind(link: BaseException) -> tuple[str, str] | None:
    """(service name, ``down``/``auth``/``missing``/``no_db``) of one exception, or None."""
    # The broker first: kombu wraps the Redis or socket error it met.
    if isinstance(link, amqp.exceptions.AccessRefused):
        return "broker", "auth"
    if isinstance(link, kombu.exceptions.OperationalError | amqp.exceptions.ConnectionError):
        cause = link.__cause__
        if isinstance(cause, redis_errors.AuthenticationError | amqp.exceptions.AccessRefused):
            return "broker", "auth"
        if cause is not None and _no_such_db(cause):
            return "broker", "no_db"
        return "broker", "down"
    if _no_such_db(link):
        return "redis", "no_db"
    if isinstance(link, redis_errors.AuthenticationError):
        return "redis", "auth"
    if isinstance(link, redis_errors.ResponseError) and str(link).startswith(
        ("NOAUTH", "WRONGPASS", "HELLO must be called")
    ):
        return "redis", "auth"
    if isinstance(link, redis_errors.ConnectionError | redis_errors.TimeoutError):
        return "redis", "down"
    if isinstance(link, sqlalchemy.exc.DBAPIError):
        state = _sqlstate(link) or ""
        if state.startswith(_PG_AUTH):
            return "database", "auth"
        if state.startswith(_PG_MISSING):
            return "database", "missing"
        if state.startswith(_PG_DOWN) or isinstance(
            link, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError
        ):
            return "database", "down"
        return None  # a query that failed: a bug, not an outage
    raw_state = getattr(link, "sqlstate", None)
    if type(link).__module__.startswith("asyncpg") and isinstance(raw_state, str):
        if raw_state.startswith(_PG_AUTH):
            return "database", "auth"
        if raw_state.startswith(_PG_MISSING):
            return "database", "missing"
        if raw_state.startswith(_PG_DOWN):
            return "database", "down"
        return None
    if isinstance(link, OSError):
        # A bare socket or file error is a state backend's service down when it comes
        # from the code reaching that service (shared/state/backends.py names it).
        for backend in BACKENDS:
            if backend.kind and _from_code(link.__traceback__, backend.error_frames):
                return backend.kind, "down"
    return None


def _reason(exc: BaseException, secrets: set[str]) -> str:
    # The driver's own words, on one line: SQLAlchemy's wrapper adds the statement and a link.
    inner = exc
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        inner = exc.orig
    text = " ".join(str(inner).split()) or type(inner).__name__
    if len(text) > 240:
        text = text[:239] + "…"
    return RedactingFilter(secrets).redact(text)


def service_error(exc: BaseException, settings: Settings) -> ReactqError | None:
    """The ``ServiceUnavailableError`` that ``exc`` amounts to, or None when it is not
    a failure to reach (or log in to) Redis, the broker or the state database.

    A Redis that answered but has no database of the URL's number is a ``ConfigError``
    instead: the URL is wrong, and no retry mends it."""
    for link in _chain(exc):
        found = _kind(link)
        if found is None:
            continue
        name, kind = found
        service = {
            "redis": Service.redis,
            "broker": Service.broker,
            "database": Service.database,
        }[name](settings)
        if kind == "no_db":
            return no_such_database(service)
        return unavailable(service, link, kind)
    return None


def no_such_database(service: Service) -> ConfigError:
    """The error for a Redis (or Redis broker) URL whose database number the server
    does not have."""
    url = redact_url(service.url)
    db = urlsplit(service.url).path.strip("/") or "0"
    return ConfigError(
        f"{service.label} at {url} answered but has no database {db} (DB index is out of "
        f"range): set {service.setting.split()[0]} to a database it has, as in "
        "redis://host:6379/0 (a server has 16, 0 to 15, unless its `databases` says otherwise)",
        service=service.name,
        url=url,
        setting=service.setting.split()[0],
    )


def unavailable(
    service: Service, exc: BaseException, kind: str = "down"
) -> ServiceUnavailableError:
    """The error for ``service`` failing with ``exc``: ``kind`` is ``down`` (it does
    not answer), ``auth`` (it refused the credentials) or ``missing`` (no such
    database)."""
    password = urlsplit(service.url).password
    reason = _reason(exc, {password} if password else set())
    url = redact_url(service.url)
    if kind == "auth":
        message = (
            f"{service.label} at {url} refused the credentials ({reason}): "
            f"fix the user or password in {service.setting}"
        )
    elif kind == "missing":
        message = (
            f"cannot open {service.label} at {url} ({reason}): create it, "
            f"or set {service.setting} to another"
        )
    elif service.name == "database":
        message = (
            f"cannot open {service.label} at {url} ({reason}): start it or fix the URL "
            f"in {service.setting}"
        )
    else:
        message = (
            f"cannot reach {service.label} at {url} ({reason}): start it, "
            f"or set {service.setting} to one that answers"
        )
    return ServiceUnavailableError(
        message, service=service.name, url=url, setting=service.setting.split()[0]
    )


def probe_redis(settings: Settings) -> None:
    """Raise ServiceUnavailableError unless Redis answers a PING (a few seconds at most)."""
    timeouts = {
        "socket_connect_timeout": PROBE_TIMEOUT_SECONDS,
        "socket_timeout": PROBE_TIMEOUT_SECONDS,
    }
    client: redis_sync.Redis | redis_sync.RedisCluster
    try:
        if is_cluster_url(settings.redis_url):
            # Connecting learns the cluster's slots from the node named: a node that
            # is not in a cluster, or a cluster without all its slots, fails here.
            client = redis_sync.RedisCluster.from_url(node_url(settings.redis_url), **timeouts)
        else:
            client = redis_sync.Redis.from_url(settings.redis_url, **timeouts)
    except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
        raise service_error(exc, settings) or unavailable(Service.redis(settings), exc) from None
    try:
        # PING alone passes on a database the server lacks: the SELECT comes with the
        # connection, which PING opens.
        client.ping()
    except redis_errors.RedisError as exc:
        raise service_error(exc, settings) or unavailable(Service.redis(settings), exc) from None
    finally:
        client.close()


def probe_broker(settings: Settings) -> None:
    """Raise ServiceUnavailableError unless the broker accepts a connection."""
    service = Service.broker(settings)
    try:
        with kombu.Connection(service.url, connect_timeout=PROBE_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=PROBE_TIMEOUT_SECONDS
            )
    except Exception as exc:
        found = _kind(exc)
        kind = found[1] if found is not None else "down"
        if kind == "no_db":
            raise no_such_database(service) from None
        raise unavailable(service, exc, "auth" if kind == "auth" else "down") from None
