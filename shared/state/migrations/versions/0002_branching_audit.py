"""Messages numbered from 1 (a branch forked at N keeps 1..N); the audit log.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _shift(by: int) -> None:
    # Through negative numbers: a unique constraint checked row by row would
    # otherwise trip over the neighbour not yet moved.
    op.execute(sa.text("UPDATE messages SET sequence = -(sequence + :by) - 1").bindparams(by=by))
    op.execute(sa.text("UPDATE messages SET sequence = -(sequence + 1)"))


def upgrade() -> None:
    _shift(1)
    op.create_table(
        "audit_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("turn_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("ts", sa.Double, nullable=False),
        sa.Column("recorded_at", sa.Double, nullable=False),
    )
    op.create_index("ix_audit_events_session_id", "audit_events", ["session_id"])
    op.create_index("ix_audit_events_turn", "audit_events", ["turn_id", "id"])


def downgrade() -> None:
    op.drop_table("audit_events")
    _shift(-1)
