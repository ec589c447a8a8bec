"""A partial index of the compaction summaries (``summary_of`` set): a turn's read
finds its branch's latest summary without walking the branch's messages.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    summaries = sa.text("summary_of IS NOT NULL")
    op.create_index(
        "ix_messages_summaries",
        "messages",
        ["session_id", "branch_id", "sequence", "summary_of"],
        sqlite_where=summaries,
        postgresql_where=summaries,
    )


def downgrade() -> None:
    op.drop_index("ix_messages_summaries", table_name="messages")
