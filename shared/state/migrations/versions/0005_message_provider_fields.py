"""Messages keep what the provider sent beyond text and calls: the reasoning, and the
fields reactq does not know (JSON text).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("reasoning", sa.Text, nullable=True))
    op.add_column("messages", sa.Column("extra", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("extra")
        batch.drop_column("reasoning")
