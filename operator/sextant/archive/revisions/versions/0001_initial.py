"""The archive's first schema: sextant_jobs and the indexes its readers need (schema.py says why each).

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from sextant.archive.schema import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Written out, not read from schema.py: a revision is what the schema was then, whatever the code says later.
JSON = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sextant_jobs",
        sa.Column("uid", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("handler", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("recorded_at", UtcDateTime, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("finished_at", UtcDateTime),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(253)),
        sa.Column("duplicate_of", sa.String(253)),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("concurrency_key", sa.String(253)),
        sa.Column("run_at", UtcDateTime),
        sa.Column("payload", JSON),
        sa.Column("payload_bytes", sa.Integer, nullable=False),
        sa.Column("payload_note", sa.Text),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("attempts", JSON, nullable=False),
        sa.Column("dropped_attempts", sa.Integer, nullable=False),
        sa.Column("output", JSON),
        sa.Column("output_note", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("message", sa.Text),
        sa.Column("conditions", JSON, nullable=False),
        sa.Column("schedule", sa.String(63)),
        sa.Column("scheduled_at", sa.String(64)),
        sa.Column("wait_ms", sa.BigInteger),
        sa.Column("run_ms", sa.BigInteger),
    )
    op.create_index("ix_sextant_jobs_recorded", "sextant_jobs", ["recorded_at", "uid"])
    op.create_index("ix_sextant_jobs_namespace", "sextant_jobs", ["namespace", "recorded_at", "uid"])
    op.create_index("ix_sextant_jobs_queue", "sextant_jobs", ["namespace", "queue", "recorded_at", "uid"])
    op.create_index("ix_sextant_jobs_state", "sextant_jobs", ["namespace", "state", "recorded_at", "uid"])
    op.create_index("ix_sextant_jobs_handler", "sextant_jobs", ["namespace", "handler", "recorded_at", "uid"])
    op.create_index("ix_sextant_jobs_name", "sextant_jobs", ["namespace", "name"])
    keyed = sa.text("idempotency_key IS NOT NULL")
    op.create_index("ix_sextant_jobs_idempotency", "sextant_jobs", ["namespace", "idempotency_key", "created_at"],
                    postgresql_where=keyed, sqlite_where=keyed)


def downgrade() -> None:
    op.drop_table("sextant_jobs")
