"""The SQL backend: SQLite or PostgreSQL through SQLAlchemy 2.

``store`` (SqlStateStore) with its parts mixed in: ``documents``, ``todos``,
``steps``; ``schedules`` and ``audit`` (SqlAuditSink) beside it, sharing its
engine. Underneath: ``schema`` (the tables), ``ops`` (the statements), ``engines``
(how a transaction runs), ``bulk`` (many rows in one statement).
"""
