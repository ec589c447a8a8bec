"""Turn records keep the turn's metadata, the agent's configuration version, and its
token usage and cost (a session's totals are their sums).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("metadata", sa.Text),
    ("config_version", sa.String(64)),
    ("prompt_tokens", sa.Integer),
    ("completion_tokens", sa.Integer),
    ("total_tokens", sa.Integer),
    ("cost", sa.Double),
)


def upgrade() -> None:
    for name, kind in _COLUMNS:
        op.add_column("turns", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
