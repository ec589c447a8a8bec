"""``reactq flower``: Celery's Flower, pointed at the pool's broker.

Flower shows the workers, the ``reactq.drain`` tasks and their runtimes (from
the task events every reactq worker sends). ``REACTQ_FLOWER_AUTH``
(``user:password``, comma-separated for several) turns on basic auth; it is
handed to Flower through its environment, never on the command line, where
``ps`` would show it.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings

__all__ = ["flower_app_argv", "run_flower"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def flower_app_argv(address: str, port: int, url_prefix: str = "") -> list[str]:
    """The arguments of Celery's ``flower`` command for this address and port."""
    argv = ["flower", f"--address={address}", f"--port={port}"]
    if url_prefix:
        argv.append(f"--url_prefix={url_prefix.strip('/')}")
    return argv


def run_flower(address: str, port: int, *, url_prefix: str = "", insecure: bool = False) -> int:
    """Run Flower until interrupted; 2 when an unauthenticated public bind is refused."""
    from celery import Celery

    from reactq.shared.logs import configure_logging

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
    if settings.flower_auth is not None:
        os.environ["FLOWER_BASIC_AUTH"] = settings.flower_auth.get_secret_value()
    app = Celery("reactq", broker=settings.effective_broker_url, set_as_current=False)
    app.conf.update(
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # The pool's visibility timeout, so Flower's view of the broker matches the workers'.
        broker_transport_options={"visibility_timeout": 6 * 3600},
    )
    code = app.start(flower_app_argv(address, port, url_prefix))
    return int(code or 0)
