"""Alembic migrations of the SQL state store's schema (run them through ``shared.state.migrate``
or ``reactq db upgrade``; ``alembic -c shared/state/migrations/alembic.ini`` also works)."""
