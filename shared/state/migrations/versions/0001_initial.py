"""The walking skeleton's schema: sessions, branches, messages (0-based), turns.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("active_branch", sa.String(128), nullable=False, server_default="trunk"),
        sa.Column("fence", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "branches",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("branch_id", sa.String(128), primary_key=True),
        sa.Column("parent_branch_id", sa.String(128), nullable=True),
        sa.Column("fork_sequence", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.session_id"], ondelete="CASCADE"),
    )
    op.create_table(
        "messages",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("branch_id", sa.String(128), nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=True),
        sa.Column("name", sa.Text, nullable=True),
        sa.Column("tool_calls", sa.Text, nullable=True),
        sa.Column("tool_call_id", sa.Text, nullable=True),
        sa.Column("turn_id", sa.String(128), nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.UniqueConstraint("session_id", "branch_id", "sequence", name="uq_messages_position"),
        sa.ForeignKeyConstraint(
            ["session_id", "branch_id"],
            ["branches.session_id", "branches.branch_id"],
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_messages_turn", "messages", ["turn_id"])
    op.create_table(
        "turns",
        sa.Column("turn_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("final_text", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("ix_turns_session_id", "turns", ["session_id"])


def downgrade() -> None:
    op.drop_table("turns")
    op.drop_table("messages")
    op.drop_table("branches")
    op.drop_table("sessions")
