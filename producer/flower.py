"""``reactq flower``: Celery's Flower, pointed at the pool's broker.

Flower shows the workers of one namespace (``REACTQ_NAMESPACE``), the
``reactq.drain`` tasks, from the task events reactq workers send to their
namespace's event exchange (``Keys.celery_isolation``) once Flower turns them on
(it broadcasts ``enable_events`` every 5 s; workers send none before, which
saves three broker publishes per drain). A drain task hands its session to the
worker's loop and returns, so its runtime is the hand-off, not the turn's. ``REACTQ_FLOWER_AUTH``
(``user:password``, comma-separated for several) turns on basic auth: Flower
runs in this process, so it gets the pairs as its ``--basic-auth`` option in the
arguments handed to it here, never on a command line, where ``ps`` would show
them (nor in the environment, which reactq leaves to ``Settings`` to read).
"""

from __future__ import annotations

import ipaddress
import sys

from celery import Celery

from reactq.shared.errors import ConfigError
from reactq.shared.keys import Keys
from reactq.shared.logs import configure_logging
from reactq.shared.settings import Settings

__all__ = ["flower_app_argv", "run_flower"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def flower_app_argv(
    address: str, port: int, url_prefix: str = "", basic_auth: str | None = None
) -> list[str]:
    """The arguments of Celery's ``flower`` command for this address and port.

    ``basic_auth`` (``user:password``, comma-separated) is a secret: hand the
    list to ``Celery.start`` in this process, never to a child's command line.
    """
    argv = ["flower", f"--address={address}", f"--port={port}"]
    if url_prefix:
        argv.append(f"--url_prefix={url_prefix.strip('/')}")
    if basic_auth:
        argv.append(f"--basic-auth={basic_auth}")
    return argv


def run_flower(address: str, port: int, *, url_prefix: str = "", insecure: bool = False) -> int:
    """Run Flower until interrupted; 2 when an unauthenticated public bind is refused."""
    settings = Settings.from_env()
    configure_logging(settings)
    if settings.flower_auth is None and not _is_loopback(address) and not insecure:
        print(
            f"reactq: error: refusing to serve Flower on {address} without auth: set "
            "REACTQ_FLOWER_AUTH=user:password, bind 127.0.0.1, or pass --insecure",
            file=sys.stderr,
        )
        return 2
    try:
        import flower  # noqa: F401
    except ImportError:
        raise ConfigError("Flower is not installed: pip install 'reactq[flower]'") from None
    app = Celery("reactq", broker=settings.effective_broker_url, set_as_current=False)
    app.conf.update(
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # The pool's visibility timeout, so Flower's view of the broker matches the workers'.
        broker_transport_options={"visibility_timeout": 6 * 3600},
        # The namespace's own control and event exchanges, as its workers use: another
        # namespace's workers on the same broker stay out of view.
        **Keys(settings.namespace).celery_isolation(),
    )
    auth = settings.flower_auth.get_secret_value() if settings.flower_auth else None
    code = app.start(flower_app_argv(address, port, url_prefix, auth))
    return int(code or 0)
