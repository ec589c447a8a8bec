"""Every setting, read from ``REACTQ_*`` (and ``OPENAI_*``, ``OTEL_*``) environment variables.

Each field's env var is ``REACTQ_<FIELD>`` unless its ``env`` extra says
otherwise. Settings are validated at construction: a bad value raises
ConfigError naming the variable.

This is the one module that reads the process environment (a test holds every
other module to it): others take a ``Settings``, and what a child process
inherits comes from ``process_env`` / ``child_env`` here.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)

from reactq.shared.errors import ConfigError
from reactq.shared.keys import DEFAULT_CLUSTER_SHARDS
from reactq.shared.netcheck import AllowList
from reactq.shared.redis_urls import is_cluster_url

# Settings whose env var holds a comma-separated list.
_LIST_FIELDS = frozenset(
    {"agents", "api_keys", "cors_origins", "download_allow_hosts", "webhook_allow_hosts"}
)

# The environment ``from_env`` is reading, for defaults that depend on it (the data dir).
_reading: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "reactq_settings_environ", default=None
)

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
"""The schemes a ``REACTQ_REDIS_URL`` may have."""

DEFAULT_DATABASE_DOC = "sqlite+aiosqlite:///$XDG_DATA_HOME/reactq/state.db"
"""How the docs spell the default state database (the real one names this user's folder)."""


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """reactq's folder in the user's data directory: ``$XDG_DATA_HOME/reactq``, else
    ``~/.local/share/reactq`` (the XDG Base Directory default). Not the current
    directory: a worker and a command started in different folders share it."""
    environ = os.environ if environ is None else environ
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG spec: a relative path there is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "reactq"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share" / "reactq"


def _default_database_url() -> str:
    return f"sqlite+aiosqlite:///{data_dir(_reading.get()) / 'state.db'}"


class Settings(BaseModel):
    """reactq's configuration. Build it with ``Settings.from_env()``."""

    # Each field's docstring becomes its description: docs/configuration.md is built from it.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    redis_url: str = Field(
        "redis://localhost:6379/0", json_schema_extra={"env": "REACTQ_REDIS_URL"}
    )
    """Redis for events, leases and session queues; ``redis+cluster://host:port`` (any
    node) for a Redis Cluster."""
    broker_url: str | None = Field(None, json_schema_extra={"env": "REACTQ_BROKER_URL"})
    """Celery broker; defaults to the Redis URL. A single Redis or RabbitMQ: with a
    Redis Cluster for ``REACTQ_REDIS_URL``, set it (Celery has no cluster broker)."""
    redis_cluster_shards: int = Field(
        DEFAULT_CLUSTER_SHARDS,
        ge=1,
        le=16384,
        json_schema_extra={"env": "REACTQ_REDIS_CLUSTER_SHARDS"},
    )
    """On a Redis Cluster, how many hash tags (slots) sessions are spread over; every
    producer and worker of a namespace must use the same number. More spread load over
    more nodes; each costs every reaper sweep one call."""
    database_url: str = Field(
        default_factory=_default_database_url,
        json_schema_extra={"env": "REACTQ_DATABASE_URL", "doc_default": DEFAULT_DATABASE_DOC},
    )
    """The shared state store (SQLAlchemy async URL). The default, SQLite in the user's data
    directory (``~/.local/share/reactq/state.db`` without ``XDG_DATA_HOME``), is the same
    from every directory."""
    store_outage_seconds: float = Field(
        60.0, ge=0, json_schema_extra={"env": "REACTQ_STORE_OUTAGE_SECONDS"}
    )
    """How long a worker's turn waits out a state database that does not answer (its
    calls retried with backoff, the lease kept) before the turn goes back to its queue;
    0: no waiting. The producer's and the gateway's calls never wait."""
    audit: bool = Field(True, json_schema_extra={"env": "REACTQ_AUDIT"})
    """Record every event of every turn in the SQL state database's audit log."""
    audit_spill_max_rows: int = Field(
        100_000, gt=0, json_schema_extra={"env": "REACTQ_AUDIT_SPILL_MAX_ROWS"}
    )
    """Audit rows the database could not take wait in Redis, at most this many per
    namespace (past it the oldest are dropped, logged), until a worker writes them."""
    agents: list[str] = Field(default_factory=list, json_schema_extra={"env": "REACTQ_AGENTS"})
    """Agents a worker hosts, as module[:attr] (comma-separated in the env)."""
    namespace: str = Field(
        "reactq", pattern=r"^[A-Za-z0-9_-]{1,64}$", json_schema_extra={"env": "REACTQ_NAMESPACE"}
    )
    """Prefix of every Redis key and Celery queue."""
    model: str | None = Field(None, json_schema_extra={"env": "REACTQ_MODEL"})
    """Default model name when an agent gives none."""
    openai_base_url: str | None = Field(None, json_schema_extra={"env": "OPENAI_BASE_URL"})
    """The OpenAI-compatible endpoint."""
    openai_api_key: SecretStr | None = Field(None, json_schema_extra={"env": "OPENAI_API_KEY"})
    """Its API key (never logged)."""
    llm_timeout_seconds: float = Field(
        60.0, gt=0, json_schema_extra={"env": "REACTQ_LLM_TIMEOUT_SECONDS"}
    )
    """How long one model request may take, for agents that set no ``timeout``."""
    llm_max_retries: int = Field(2, ge=0, json_schema_extra={"env": "REACTQ_LLM_MAX_RETRIES"})
    """Retries of a failed model request (429, 5xx, a dropped connection), for agents that
    set no ``max_retries``."""
    llm_requests_per_minute: float | None = Field(
        None, gt=0, json_schema_extra={"env": "REACTQ_LLM_REQUESTS_PER_MINUTE"}
    )
    """Model calls per minute the whole pool makes to ``OPENAI_BASE_URL``, per model, for
    agents on it that set no ``rate_limit`` (a budget in Redis every worker shares)."""
    llm_tokens_per_minute: int | None = Field(
        None, gt=0, json_schema_extra={"env": "REACTQ_LLM_TOKENS_PER_MINUTE"}
    )
    """Tokens per minute, likewise (estimated before a call, corrected by its usage)."""
    max_message_bytes: int = Field(
        64 * 1024, gt=0, json_schema_extra={"env": "REACTQ_MAX_MESSAGE_BYTES"}
    )
    """Largest user message accepted by submit, in UTF-8 bytes (its text parts, joined)."""
    max_image_bytes: int = Field(
        5 * 1024 * 1024, gt=0, json_schema_extra={"env": "REACTQ_MAX_IMAGE_BYTES"}
    )
    """Largest image (decoded bytes) a user message may carry inline, as a data URL."""
    max_content_bytes: int = Field(
        8 * 1024 * 1024, gt=0, json_schema_extra={"env": "REACTQ_MAX_CONTENT_BYTES"}
    )
    """Largest user message with content parts, as the JSON of its parts (images
    included, as their data URLs)."""
    max_context_bytes: int = Field(
        16 * 1024, gt=0, json_schema_extra={"env": "REACTQ_MAX_CONTEXT_BYTES"}
    )
    """Largest per-turn ``context`` accepted by submit, as JSON in UTF-8 bytes."""
    event_maxlen: int = Field(10_000, gt=0, json_schema_extra={"env": "REACTQ_EVENT_MAXLEN"})
    """Events kept per session stream (approximate cap)."""
    event_ttl_seconds: int = Field(
        3600, gt=0, json_schema_extra={"env": "REACTQ_EVENT_TTL_SECONDS"}
    )
    """A session's stream expires this long after its last event."""
    lease_ttl_seconds: float = Field(
        30.0, gt=0, json_schema_extra={"env": "REACTQ_LEASE_TTL_SECONDS"}
    )
    """A session lease lives this long unless renewed."""
    reaper_interval_seconds: float = Field(
        5.0, gt=0, json_schema_extra={"env": "REACTQ_REAPER_INTERVAL_SECONDS"}
    )
    """How often each worker looks for expired leases."""
    heartbeat_seconds: float = Field(
        15.0, gt=0, json_schema_extra={"env": "REACTQ_HEARTBEAT_SECONDS"}
    )
    """A live worker refreshes its entry in the worker registry within this interval (three
    times per interval); ``reactq send`` warns when no worker hosting the agent has."""
    schedule_refresh_seconds: float = Field(
        10.0, gt=0, json_schema_extra={"env": "REACTQ_SCHEDULE_REFRESH_SECONDS"}
    )
    """How often ``reactq beat`` reads the schedules again (added, paused, removed ones)."""
    schedule_min_interval_seconds: int = Field(
        60, ge=1, json_schema_extra={"env": "REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS"}
    )
    """The shortest interval a schedule may have (``every``, and the gap between two ticks
    of a cron expression); a shorter one is refused with ``schedule_too_frequent``."""
    max_schedules_per_tenant: int = Field(
        100, ge=1, json_schema_extra={"env": "REACTQ_MAX_SCHEDULES_PER_TENANT"}
    )
    """Schedules a tenant may have (a scoped API key's session prefix; without one, the
    whole namespace); one more is refused with ``too_many_schedules`` (409)."""
    max_attempts: int = Field(3, ge=1, json_schema_extra={"env": "REACTQ_MAX_ATTEMPTS"})
    """Runs of one turn before it ends with status error."""
    shutdown_grace_seconds: float = Field(
        30.0, ge=0, json_schema_extra={"env": "REACTQ_SHUTDOWN_GRACE_SECONDS"}
    )
    """On SIGTERM, how long running turns may take to finish."""
    concurrency: int = Field(100, ge=1, json_schema_extra={"env": "REACTQ_CONCURRENCY"})
    """Turns one worker process holds in flight."""
    session_meta_ttl_seconds: int = Field(
        30 * 86400, gt=0, json_schema_extra={"env": "REACTQ_SESSION_META_TTL_SECONDS"}
    )
    """How long Redis remembers a session's agent after its last turn."""
    api_keys: list[SecretStr] = Field(
        default_factory=list, json_schema_extra={"env": "REACTQ_API_KEYS"}
    )
    """Keys the gateway accepts as ``Authorization: Bearer`` (comma-separated in the env;
    ``name:key`` names a key, and the name is recorded as the decider of its approvals;
    ``name:key;prefix=acme-;agents=a|b;ro`` scopes it to a tenant's sessions, some
    agents, read-only)."""
    api_key: SecretStr | None = Field(None, json_schema_extra={"env": "REACTQ_API_KEY"})
    """The key a client (``reactq send --gateway``) presents to a gateway."""
    cors_origins: list[str] = Field(
        default_factory=list, json_schema_extra={"env": "REACTQ_CORS_ORIGINS"}
    )
    """Origins browsers may call the gateway from (comma-separated; none by default)."""
    max_request_bytes: int = Field(
        512 * 1024, gt=0, json_schema_extra={"env": "REACTQ_MAX_REQUEST_BYTES"}
    )
    """Largest HTTP request body the gateway reads; larger ones get 413 unread."""
    sse_heartbeat_seconds: float = Field(
        15.0, gt=0, json_schema_extra={"env": "REACTQ_SSE_HEARTBEAT_SECONDS"}
    )
    """An idle event stream gets a comment this often, so proxies keep it open."""
    sse_client_buffer: int = Field(
        1000, ge=1, json_schema_extra={"env": "REACTQ_SSE_CLIENT_BUFFER"}
    )
    """Events the gateway holds for one slow client before disconnecting it (it may resume)."""
    log_level: str = Field(
        "INFO",
        pattern=r"^(?i:DEBUG|INFO|WARNING|ERROR|CRITICAL)$",
        json_schema_extra={"env": "REACTQ_LOG_LEVEL"},
    )
    """Level of reactq's logs (``--loglevel`` wins): DEBUG, INFO, WARNING, ERROR, CRITICAL."""
    log_format: Literal["text", "json"] = Field(
        "text", json_schema_extra={"env": "REACTQ_LOG_FORMAT"}
    )
    """``text`` (one readable line per event) or ``json`` (one JSON object per line)."""
    metrics_port: int = Field(0, ge=0, le=65535, json_schema_extra={"env": "REACTQ_METRICS_PORT"})
    """Port of a worker's Prometheus ``/metrics`` (0: off; needs the ``metrics`` extra)."""
    metrics_address: str = Field("0.0.0.0", json_schema_extra={"env": "REACTQ_METRICS_ADDRESS"})
    """Address the worker's metrics port binds to."""
    flower_auth: SecretStr | None = Field(None, json_schema_extra={"env": "REACTQ_FLOWER_AUTH"})
    """``user:password`` (comma-separated for several) that ``reactq flower`` asks for."""
    tracing: bool = Field(False, json_schema_extra={"env": "REACTQ_TRACING"})
    """Emit OpenTelemetry spans (submit, drain, turn, model and tool calls; ``otel`` extra)."""
    otel_service_name: str | None = Field(None, json_schema_extra={"env": "OTEL_SERVICE_NAME"})
    """Service name on the spans (default ``reactq-worker`` / ``reactq-gateway``)."""
    otel_exporter_otlp_endpoint: str | None = Field(
        None, json_schema_extra={"env": "OTEL_EXPORTER_OTLP_ENDPOINT"}
    )
    """OTLP/HTTP collector spans are sent to (``/v1/traces`` is appended)."""
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        None, json_schema_extra={"env": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
    )
    """Full OTLP/HTTP traces URL; wins over ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    otel_traces_exporter: str | None = Field(
        None, json_schema_extra={"env": "OTEL_TRACES_EXPORTER"}
    )
    """``console`` prints spans to stderr when no OTLP endpoint is set."""
    otel_capture_content: bool = Field(
        False, json_schema_extra={"env": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"}
    )
    """Record messages and tool data on the spans (the GenAI conventions' opt-in)."""
    sse_client_buffer_bytes: int = Field(
        8 * 1024 * 1024, ge=1, json_schema_extra={"env": "REACTQ_SSE_CLIENT_BUFFER_BYTES"}
    )
    """Bytes of events the gateway holds for one slow client before disconnecting it (it may
    resume); a single larger event still goes to a client that keeps up."""
    request_timeout_seconds: float = Field(
        10.0, gt=0, json_schema_extra={"env": "REACTQ_REQUEST_TIMEOUT_SECONDS"}
    )
    """How long a gateway client may take to send a request's headers, then its body (408)."""
    workspace_root: str = Field(
        # Beside the default state database, for the same reason: the same from every directory.
        default_factory=lambda: str(data_dir(_reading.get()) / "workspaces"),
        min_length=1,
        json_schema_extra={
            "env": "REACTQ_WORKSPACE_ROOT",
            "doc_default": "$XDG_DATA_HOME/reactq/workspaces",
        },
    )
    """Directory of the file tools' workspaces (``reactq.bundles``), one per session, created on
    first use; every worker must mount the same one, and so must a producer, gateway or CLI
    that undoes a turn (``reactq undo``)."""
    workspace_quota_bytes: int = Field(
        100 * 1024 * 1024, gt=0, json_schema_extra={"env": "REACTQ_WORKSPACE_QUOTA_BYTES"}
    )
    """Largest total size of one session's workspace (files' bytes, 4096 for each folder); a
    change that would pass it is refused, and a ``run_code`` run that passes it loses what it
    wrote last until the workspace is back within it."""
    workspace_max_inodes: int = Field(
        20_000, gt=0, json_schema_extra={"env": "REACTQ_WORKSPACE_MAX_INODES"}
    )
    """Files, folders and links one session's workspace may hold, enforced like the quota."""
    download_max_bytes: int = Field(
        50 * 1024 * 1024, gt=0, json_schema_extra={"env": "REACTQ_DOWNLOAD_MAX_BYTES"}
    )
    """Largest file ``download_file`` fetches: refused by its Content-Length, else cut off."""
    download_allow_hosts: list[str] = Field(
        default_factory=list, json_schema_extra={"env": "REACTQ_DOWNLOAD_ALLOW_HOSTS"}
    )
    """Host names, addresses or networks (CIDR) ``download_file`` may reach though they are not
    public (comma-separated; none by default; cloud metadata addresses stay refused). An entry
    alone opens ports 80 and 443; ``host:port`` one port, ``host:*`` every port (``[v6]:port``
    for an IPv6 address)."""
    download_deadline_seconds: float = Field(
        120.0, gt=0, json_schema_extra={"env": "REACTQ_DOWNLOAD_DEADLINE_SECONDS"}
    )
    """How long one ``download_file`` may take in all (every redirect and byte of the body):
    a server that trickles its answer is cut off then, and nothing is saved."""
    sandbox: Literal["bwrap", "none"] = Field("bwrap", json_schema_extra={"env": "REACTQ_SANDBOX"})
    """How ``run_code`` / ``run_file`` (``reactq.bundles``) run code: ``bwrap`` in a bubblewrap
    sandbox (the tools are left out, with a log line, where it cannot run); ``none`` with the
    worker's own rights, which every call's result then says."""
    sandbox_cgroup: str | None = Field(None, json_schema_extra={"env": "REACTQ_SANDBOX_CGROUP"})
    """Cgroup under which each ``run_code`` / ``run_file`` run gets one of its own (memory
    with swap off, processes and CPU bounded for the run as a whole), named as in
    ``/proc/self/cgroup`` (cgroup v2: memory, pids and cpu delegated to it); unset: the
    worker's own; ``off``: none. Without one, limits hold per process only: start-up logs
    which."""
    sandbox_uid: int = Field(
        65534, ge=1, le=2**32 - 2, json_schema_extra={"env": "REACTQ_SANDBOX_UID"}
    )
    """Host uid and gid that sandboxed code runs as under a worker running as root (never
    root); the session's workspace is handed to it before each run. A worker that is not
    root runs code as its own uid."""
    image_max_bytes: int = Field(
        20 * 1024 * 1024, gt=0, json_schema_extra={"env": "REACTQ_IMAGE_MAX_BYTES"}
    )
    """Largest image file ``analyze_image`` sends to the vision model (checked before reading)."""
    webhook_secret: SecretStr | None = Field(
        None, json_schema_extra={"env": "REACTQ_WEBHOOK_SECRET"}
    )
    """Key of the HMAC-SHA256 signature on every webhook POST (``Reactq-Signature``); a turn
    with a webhook is refused without it. Producers and workers need the same one."""
    webhook_allow_hosts: list[str] = Field(
        default_factory=list, json_schema_extra={"env": "REACTQ_WEBHOOK_ALLOW_HOSTS"}
    )
    """Host names, addresses or networks (CIDR) a webhook may be sent to though they are not
    public (comma-separated; none by default; cloud metadata addresses stay refused); ports as
    for ``REACTQ_DOWNLOAD_ALLOW_HOSTS``."""
    webhook_max_attempts: int = Field(
        6, ge=1, le=30, json_schema_extra={"env": "REACTQ_WEBHOOK_MAX_ATTEMPTS"}
    )
    """POSTs of one webhook delivery before it is given up (a 2xx answer ends it)."""
    webhook_backoff_seconds: float = Field(
        2.0, gt=0, json_schema_extra={"env": "REACTQ_WEBHOOK_BACKOFF_SECONDS"}
    )
    """Wait before a failed webhook's second attempt; each further wait doubles (at most
    an hour)."""
    webhook_timeout_seconds: float = Field(
        10.0, gt=0, json_schema_extra={"env": "REACTQ_WEBHOOK_TIMEOUT_SECONDS"}
    )
    """How long one webhook POST may take (connect to answer) before it counts as failed."""
    approval_timeout_seconds: float = Field(
        86400.0, gt=0, json_schema_extra={"env": "REACTQ_APPROVAL_TIMEOUT_SECONDS"}
    )
    """How long a tool call waits for a person's decision; then it counts as denied ("no
    decision in time") and the turn goes on."""
    delegation_timeout_seconds: float = Field(
        86400.0, gt=0, json_schema_extra={"env": "REACTQ_DELEGATION_TIMEOUT_SECONDS"}
    )
    """How long a turn parked for its child turns (``Agent(subagents=...)``) waits; then
    the children still running are cancelled and the model reads them as failed."""

    dotenv: bool = Field(True, json_schema_extra={"env": "REACTQ_DOTENV"})
    """Read a ``.env`` file from the working directory: its variables fill those the
    environment does not set (the environment wins). ``0`` ignores the file; set it in
    the environment, not in the file."""

    # The environment ``from_env`` read (None: the process's), for ``secret_from_env``.
    _environ: Mapping[str, str] | None = PrivateAttr(default=None)
    _dotenv_read: tuple[Path, tuple[str, ...]] | None = PrivateAttr(default=None)

    @property
    def dotenv_read(self) -> tuple[Path, tuple[str, ...]] | None:
        """The ``.env`` file these settings read, and the variables it set (those the
        environment did not); None when none was read."""
        return self._dotenv_read

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        if _scheme(url) not in REDIS_SCHEMES:
            raise ValueError(
                f"not a Redis URL ({_named_scheme(url)}): start it with one of "
                f"{', '.join(s + '://' for s in REDIS_SCHEMES)}, as in redis://localhost:6379/0"
            )
        return url

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, url: str | None) -> str | None:
        if url is None:
            return None
        # Imported here: only a pool with a broker of its own names one, and such a
        # process imports kombu anyway.
        from kombu.transport import TRANSPORT_ALIASES

        if _scheme(url).split("+")[0] not in TRANSPORT_ALIASES:
            raise ValueError(
                f"not a broker URL ({_named_scheme(url)}): use redis://host:6379/0 or "
                "amqp://user:password@host:5672//"
            )
        return url

    @field_validator("download_allow_hosts", "webhook_allow_hosts")
    @classmethod
    def _allow_list(cls, entries: list[str]) -> list[str]:
        AllowList(entries)  # a bad entry (a port out of range, say) is a ValueError here
        return entries

    def secret_from_env(self, name: str) -> SecretStr | None:
        """The value of the environment variable ``name`` as a secret (None when unset or
        empty): an agent's ``api_key_env``. Read from the environment these settings
        were read from."""
        environ = os.environ if self._environ is None else self._environ
        value = environ.get(name)
        return SecretStr(value) if value else None

    @property
    def effective_broker_url(self) -> str:
        """The broker URL, defaulting to the Redis URL."""
        return self.broker_url or self.redis_url

    @property
    def database_path(self) -> Path | None:
        """The SQLite file of ``database_url`` (absolute: a relative one is resolved
        against the current directory), or None for another database or an in-memory one."""
        scheme, sep, rest = self.database_url.partition(":///")
        if not sep or scheme.split("+")[0] != "sqlite":
            return None
        path = rest.split("?", 1)[0]
        if path in ("", ":memory:") or path.startswith("file:"):
            return None
        return Path(path).absolute()

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Field name -> environment variable."""
        out = {}
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra
            env = extra.get("env") if isinstance(extra, dict) else None
            out[name] = str(env) if env else f"REACTQ_{name.upper()}"
        return out

    @staticmethod
    def process_env(select: Callable[[str], object] | None = None) -> dict[str, str]:
        """A copy of this process's environment: the variables whose name ``select``
        accepts, or all of them.

        For what a child process inherits (an MCP server gets a safe few) and for
        log redaction (values of secret-named variables).
        """
        return {k: v for k, v in os.environ.items() if select is None or select(k)}

    def child_env(self, **extra: str) -> dict[str, str]:
        """The environment of a reactq child process: this process's, these settings
        as their variables, then ``extra``.

        The child's ``Settings.from_env()`` gets these settings back, including
        those changed in this process (the offline model's endpoint, a namespace);
        a setting changed to None is removed.
        """
        env = self.process_env()
        names = self.env_names()
        for name in sorted(self.model_fields_set):
            value = getattr(self, name)
            if value is None:
                env.pop(names[name], None)
            else:
                env[names[name]] = _env_value(value)
        env.update(extra)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every setting from the environment; keyword overrides win.

        Read from the process's environment (``environ`` None), a ``.env`` file in the
        working directory fills the variables it does not set, unless
        ``REACTQ_DOTENV`` is false. A given ``environ`` is read alone."""
        dotenv_read: tuple[Path, tuple[str, ...]] | None = None
        if environ is None:
            environ, dotenv_read = _with_dotenv(os.environ)
        values: dict[str, Any] = {}
        for name, env in cls.env_names().items():
            raw = environ.get(env)
            if raw is None or raw == "":
                continue
            if name in _LIST_FIELDS:
                values[name] = [a.strip() for a in raw.split(",") if a.strip()]
            else:
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        reading = _reading.set(environ)
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            names = cls.env_names()
            problems = "; ".join(
                f"{names.get(str(e['loc'][0]), e['loc'][0])}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise ConfigError(f"invalid settings: {problems}") from None
        finally:
            _reading.reset(reading)
        settings.check_broker()
        settings._environ = environ
        settings._dotenv_read = dotenv_read
        return settings

    def check_broker(self) -> None:
        """Raise ConfigError when the broker would be a Redis Cluster."""
        if is_cluster_url(self.effective_broker_url):
            where = (
                "REACTQ_BROKER_URL"
                if self.broker_url
                else "REACTQ_REDIS_URL (no REACTQ_BROKER_URL)"
            )
            raise ConfigError(
                f"invalid settings: {where} is a Redis Cluster, and Celery's broker cannot be one: "
                "set REACTQ_BROKER_URL to a single Redis (redis://...) or RabbitMQ (amqp://...)"
            )


def _with_dotenv(
    environ: Mapping[str, str],
) -> tuple[Mapping[str, str], tuple[Path, tuple[str, ...]] | None]:
    """``environ`` with ``./.env``'s variables under it, and what the file added; or
    ``environ`` alone when REACTQ_DOTENV is false or there is no file."""
    flag = environ.get("REACTQ_DOTENV", "").strip().lower()
    if flag in ("0", "false", "no", "off"):
        return environ, None
    try:
        path = Path.cwd() / ".env"
        if not path.is_file():
            return environ, None
    except OSError:  # a working directory that was removed has no .env
        return environ, None
    from dotenv import dotenv_values  # only when there is a file to read

    found = {k: v for k, v in dotenv_values(path).items() if v is not None}
    added = tuple(sorted(k for k in found if k not in environ))
    return {**found, **environ}, (path, added)


def _scheme(url: str) -> str:
    """A URL's scheme, lower-cased ("" without one)."""
    return url.partition("://")[0].lower() if "://" in url else ""


def _named_scheme(url: str) -> str:
    """How an error names a URL's scheme (never the rest: it may hold a password)."""
    return f"scheme {_scheme(url)!r}" if _scheme(url) else "no scheme://"


def _env_value(value: Any) -> str:
    """A setting as its environment variable spells it (``from_env`` reads it back)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_env_value(v) for v in value)
    return str(value)
