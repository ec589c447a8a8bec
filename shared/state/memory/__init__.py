"""The memory backend: the state of one process, in dicts (embedded mode and tests).

``store`` (MemoryStateStore) with its parts mixed in: ``documents``, ``todos``,
``steps``; ``schedules`` beside it. No audit log (``shared/state/backends.py``).
"""
