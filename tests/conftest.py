"""Real services for the suite.

Redis: ``REACTQ_TEST_REDIS_URL`` (or ``REACTQ_REDIS_URL``), else 127.0.0.1:6379;
when none answers and ``redis-server`` is installed, a private one is started on
a free port. PostgreSQL: ``REACTQ_TEST_POSTGRES_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``); each run creates a fresh
database and drops it afterwards. A service that cannot be had skips its tests
with a reason, or fails them when ``REACTQ_REQUIRE_SERVICES=1`` (as in CI).
Every run uses its own Redis key namespace and deletes its keys at the end.

Servers a test may break (``tests/fault_servers.py``): ``private_redis``, a
redis-server with its AOF on a free port, one a test module; ``private_postgres``, a
PostgreSQL cluster the session starts itself with ``initdb`` / ``pg_ctl`` (as the
``postgres`` OS user when run as root), one a session.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
import redis as redis_sync

from reactq.shared.keys import Keys
from reactq.shared.redis_client import forget_namespace
from reactq.shared.redis_urls import node_url
from tests.fault_servers import (
    PG_HINT,
    PrivatePostgres,
    PrivateRedis,
    ServerUnavailable,
    postgres_bin_dir,
)

REQUIRE = os.environ.get("REACTQ_REQUIRE_SERVICES") == "1"

# The default state database is in the user's data directory (shared/settings.py): the
# suite, and every process it starts, gets a data directory of its own instead of the
# developer's.
DATA_HOME = tempfile.mkdtemp(prefix="reactq-test-data-")
os.environ["XDG_DATA_HOME"] = DATA_HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(DATA_HOME, ignore_errors=True)


def unavailable(reason: str) -> None:
    """Skip (or fail, when services are required) with a reason that says how to fix it."""
    if REQUIRE:
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_answers(url: str) -> bool:
    try:
        client = redis_sync.Redis.from_url(url, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis_sync.RedisError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server URL that answers."""
    url = (
        os.environ.get("REACTQ_TEST_REDIS_URL")
        or os.environ.get("REACTQ_REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )
    if _redis_answers(url):
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable(
            f"no Redis answers at {url} and redis-server is not installed: "
            "start Redis or set REACTQ_TEST_REDIS_URL"
        )
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="reactq-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not _redis_answers(url):
        if time.monotonic() > deadline:
            proc.kill()
            unavailable("a private redis-server did not start within 10 s")
        time.sleep(0.05)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 30000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


def _cluster_answers(url: str) -> bool:
    try:
        client = redis_sync.RedisCluster.from_url(node_url(url), socket_connect_timeout=1)
    except redis_sync.RedisError:
        return False
    try:
        info = client.cluster_info()
        return bool(info.get("cluster_state") == "ok")
    except redis_sync.RedisError:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster_url(namespace: str) -> Iterator[str]:
    """A Redis Cluster URL (``redis+cluster://``): ``REACTQ_TEST_REDIS_CLUSTER_URL``, else
    three masters started here (``redis-server --cluster-enabled yes``, joined by
    ``redis-cli --cluster create``). The run's namespace is deleted from it at the end."""
    url = os.environ.get("REACTQ_TEST_REDIS_CLUSTER_URL")
    if url:
        if not _cluster_answers(url):
            unavailable(f"no Redis Cluster answers at {url} (REACTQ_TEST_REDIS_CLUSTER_URL)")
        yield url
        forget_namespace(url, namespace)
        return
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        unavailable(
            "a Redis Cluster needs redis-server and redis-cli (Debian: redis-server), "
            "or set REACTQ_TEST_REDIS_CLUSTER_URL"
        )
    assert server is not None and cli is not None
    workdir = tempfile.mkdtemp(prefix="reactq-cluster-")
    ports: list[int] = []
    while len(ports) < 3:
        port = _cluster_port()
        if port not in ports:
            ports.append(port)
    procs = [
        subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{port}.conf",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    url = f"redis+cluster://127.0.0.1:{ports[0]}/0"
    try:
        deadline = time.monotonic() + 10
        while not all(_redis_answers(f"redis://127.0.0.1:{port}/0") for port in ports):
            if time.monotonic() > deadline:
                unavailable("the Redis Cluster's servers did not start within 10 s")
            time.sleep(0.05)
        created = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            unavailable(f"redis-cli --cluster create failed: {created.stdout}{created.stderr}")
        deadline = time.monotonic() + 30
        while not _cluster_answers(url):
            if time.monotonic() > deadline:
                unavailable("the Redis Cluster did not reach cluster_state:ok within 30 s")
            time.sleep(0.1)
        yield url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def namespace(redis_url: str) -> Iterator[str]:
    """A Redis key namespace of this test run; its keys are deleted at the end."""
    ns = f"rqt{uuid.uuid4().hex[:10]}"
    yield ns
    # Sub-namespaces (``<ns>-pg`` ...), Celery's queues and bindings, and the
    # messages killed workers left unacknowledged.
    forget_namespace(redis_url, ns)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """An asyncpg URL of a fresh PostgreSQL database, dropped at the end of the run."""
    base = os.environ.get(
        "REACTQ_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    )
    try:
        import asyncpg
    except ImportError:
        unavailable("asyncpg is not installed: pip install 'reactq[postgres]'")
    import asyncio

    import asyncpg

    plain = base.replace("postgresql+asyncpg://", "postgresql://")
    dbname = f"reactq_test_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(plain, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(admin(f'CREATE DATABASE "{dbname}"'))
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        unavailable(
            f"PostgreSQL at {plain} is unavailable ({exc.__class__.__name__}: {exc}): "
            "start it or set REACTQ_TEST_POSTGRES_URL"
        )
    head, _, _ = base.rpartition("/")
    try:
        yield f"{head}/{dbname}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """A RabbitMQ URL that answers (``REACTQ_TEST_AMQP_URL``, default local guest)."""
    url = os.environ.get("REACTQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        unavailable(
            f"RabbitMQ does not answer at {url} ({exc.__class__.__name__}): start it "
            "(rabbitmq-server -detached) or set REACTQ_TEST_AMQP_URL"
        )
    return url


def delete_amqp_queues(url: str, names: list[str]) -> None:
    """Remove queues a test declared on RabbitMQ (they are durable)."""
    from kombu import Connection

    with Connection(url, connect_timeout=3) as conn:
        channel = conn.default_channel
        for name in names:
            try:
                channel.queue_delete(name)
            except Exception:  # already gone, or never declared
                channel = conn.channel()


@pytest.fixture(params=["redis", "cluster"])
def where(request: pytest.FixtureRequest, redis_url: str, namespace: str) -> tuple[str, Keys]:
    """Each test on a single Redis, then on a Redis Cluster (sessions sharded): the
    protocol's tests and the rate limit's (a module may define its own ``where``)."""
    if request.param == "cluster":
        return request.getfixturevalue("redis_cluster_url"), Keys(namespace, shards=8)
    return redis_url, Keys(namespace)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this test session's own, which its tests may stop and
    start (``tests/fault_servers.py``); each test makes its own database in it."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        unavailable(f"no initdb/pg_ctl for a private PostgreSQL: {PG_HINT}")
    assert bin_dir is not None
    try:
        server = PrivatePostgres(bin_dir)
    except ServerUnavailable as exc:
        unavailable(str(exc))
    try:
        server.init()
        server.start()
    except ServerUnavailable as exc:
        server.close()
        unavailable(f"a private PostgreSQL did not start: {exc}")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """A redis-server of this test module's own, with its AOF, which its tests may
    restart or pause (``tests/fault_servers.py``)."""
    workdir = tmp_path_factory.mktemp("private-redis")
    try:
        server = PrivateRedis(workdir)
        server.start()
    except ServerUnavailable as exc:
        unavailable(str(exc))
    try:
        yield server
    finally:
        server.stop()
