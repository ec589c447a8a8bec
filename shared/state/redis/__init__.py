"""The Redis backend: the state in Redis (one hash tag per session, Lua for each
read-check-write), on a single server or a Cluster.

``store`` (RedisStateStore) with its parts mixed in: ``documents``, ``todos``,
``steps``; ``schedules`` beside it. Each module's Lua scripts are the ``.lua``
files beside it. No audit log (``shared/state/backends.py``).
"""
