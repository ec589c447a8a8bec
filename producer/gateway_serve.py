"""``reactq serve``: the gateway under uvicorn, refusing an unsafe bind."""

from __future__ import annotations

import sys

from reactq.producer.gateway_security import ApiKeys, check_bind
from reactq.shared.settings import Settings


def serve(host: str, port: int, *, insecure: bool = False, log_level: str = "info") -> int:
    """Run the gateway until interrupted; 2 when the bind is refused."""
    import uvicorn

    from reactq.producer.gateway import create_app

    settings = Settings.from_env()
    keys = ApiKeys(settings.api_keys)
    refusal = check_bind(host, keys, insecure)
    if refusal is not None:
        print(f"reactq: error: {refusal}", file=sys.stderr)
        return 2
    if not keys.enabled:
        where = "loopback only" if not insecure else f"{host} WITHOUT AUTH (--insecure)"
        print(
            f"reactq: no API keys configured (REACTQ_API_KEYS): serving on {where}",
            file=sys.stderr,
            flush=True,
        )
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        # Event streams never end on their own: give them a moment, then close them.
        timeout_graceful_shutdown=3,
    )
    return 0
