"""PostgreSQL: a worker's turn steps as functions, each one call (one round trip,
in autocommit: the call is its own transaction). SQLite: nothing.

Each must read after it locked the session row: a single SQL statement reads
with the snapshot taken before it waited for the lock, and would miss what the
row's previous holder wrote. A PL/pgSQL function runs each of its statements
with a fresh snapshot (READ COMMITTED), so it can lock, then read.

``reactq_commit_turn`` returns ``(outcome, detail)``; ``sql/turn_ops.py``'s ``COMMITTED`` and
its peers name the outcomes. Every refusal comes before the first write, so a
refused call writes nothing:

- 1: no such session;
- 2: a newer fencing token is stored (``detail``: it);
- 3: the turn has a record already (one being written by another transaction is
  waited for, by the insert on the primary key);
- 4: the session has no such branch (``detail``: its name), the turn no record;
- 0: committed: the record, the session row's fence and ``updated_at``, the
  messages after the branch's tip, and (``p_drop``) the turn's checkpoint's removal.

``reactq_begin_turn`` upserts the session (checking and moving the fence; a new
row gets its trunk), then reads the turn's history (``sql/ops.py``'s ``_turn_history``'s
query, copied: a change to one needs the other). Its first row is the session's
(no agent when the fence refused: then ``s_fence`` is the stored token), the
others the history's messages, in order.

Their parameters and columns name the columns of ``turns`` and ``messages``: a
column added to either needs a migration that replaces them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_SIGNATURE = """reactq_commit_turn(
    p_sid varchar, p_fence bigint, p_bid varchar, p_now double precision, p_drop boolean,
    v_turn_id varchar, v_session_id varchar, v_status varchar, v_attempt integer,
    v_final_text text, v_error text, v_created_at double precision, v_metadata text,
    v_config_version varchar, v_prompt_tokens integer, v_completion_tokens integer,
    v_total_tokens integer, v_cost double precision,
    m_role varchar[], m_content text[], m_name text[], m_tool_calls text[],
    m_tool_call_id text[], m_turn_id varchar[], m_reasoning text[], m_extra text[],
    m_summary_of integer[], m_parts text[],
    OUT outcome integer, OUT detail text
)"""

_BODY = """
DECLARE
    r_active varchar;
    r_fence bigint;
    r_branch varchar;
    r_tip integer;
BEGIN
    -- The lock: what an UPDATE of the row takes (a fork's foreign key check still
    -- passes), waiting for the previous holder, then reading the row it left.
    SELECT s.active_branch, s.fence INTO r_active, r_fence
    FROM sessions AS s WHERE s.session_id = p_sid FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        outcome := 1;
        RETURN;
    END IF;
    IF p_fence IS NOT NULL AND r_fence > p_fence THEN
        outcome := 2;
        detail := r_fence::text;
        RETURN;
    END IF;
    r_branch := coalesce(p_bid, r_active);
    -- A statement of its own, after the lock: its snapshot holds every message
    -- committed before (each writer of the session's messages locks the row first).
    SELECT coalesce(
        (SELECT max(m.sequence) FROM messages AS m
         WHERE m.session_id = p_sid AND m.branch_id = r_branch),
        b.fork_sequence, 0)
    INTO r_tip
    FROM branches AS b WHERE b.session_id = p_sid AND b.branch_id = r_branch;
    IF NOT FOUND THEN
        -- Refused without a write: a record already there is the answer given
        -- first, as when the branch exists.
        PERFORM 1 FROM turns AS t WHERE t.turn_id = v_turn_id;
        IF FOUND THEN
            outcome := 3;
        ELSE
            outcome := 4;
            detail := r_branch;
        END IF;
        RETURN;
    END IF;
    -- The turn's record: its primary key makes this the turn's one commit.
    INSERT INTO turns (
        turn_id, session_id, status, attempt, final_text, error, created_at, metadata,
        config_version, prompt_tokens, completion_tokens, total_tokens, cost
    ) VALUES (
        v_turn_id, v_session_id, v_status, v_attempt, v_final_text, v_error, v_created_at,
        v_metadata, v_config_version, v_prompt_tokens, v_completion_tokens,
        v_total_tokens, v_cost
    ) ON CONFLICT (turn_id) DO NOTHING;
    IF NOT FOUND THEN
        outcome := 3;
        RETURN;
    END IF;
    UPDATE sessions AS s SET fence = coalesce(p_fence, s.fence), updated_at = p_now
    WHERE s.session_id = p_sid;
    INSERT INTO messages (
        session_id, branch_id, sequence, role, content, name, tool_calls, tool_call_id,
        turn_id, reasoning, extra, summary_of, parts, created_at
    )
    SELECT p_sid, r_branch, r_tip + n.ord, n.role, n.content, n.name, n.tool_calls,
        n.tool_call_id, n.turn_id, n.reasoning, n.extra, n.summary_of, n.parts, p_now
    FROM unnest(
        m_role, m_content, m_name, m_tool_calls, m_tool_call_id, m_turn_id, m_reasoning,
        m_extra, m_summary_of, m_parts
    ) WITH ORDINALITY AS n(
        role, content, name, tool_calls, tool_call_id, turn_id, reasoning, extra,
        summary_of, parts, ord
    );
    IF p_drop THEN
        DELETE FROM turn_checkpoints AS c WHERE c.turn_id = v_turn_id;
    END IF;
    outcome := 0;
END
"""

_BEGIN_SIGNATURE = """reactq_begin_turn(
    p_sid varchar, p_agent varchar, p_bid varchar, p_fence bigint, p_now double precision
) RETURNS TABLE (
    s_agent varchar, s_active_branch varchar, s_fence bigint, s_created_at double precision,
    m_id bigint, m_session_id varchar, m_branch_id varchar, m_sequence integer,
    m_role varchar, m_content text, m_name text, m_tool_calls text, m_tool_call_id text,
    m_turn_id varchar, m_created_at double precision, m_reasoning text, m_extra text,
    m_summary_of integer, m_parts text
)"""

_BEGIN_BODY = """
DECLARE
    r_branch varchar;
BEGIN
    -- The upsert checks and moves the fence (p_fence NULL: unfenced, a no-op update
    -- that returns the row), waiting for the row's previous holder.
    INSERT INTO sessions AS s (session_id, agent, active_branch, fence, created_at, updated_at)
    VALUES (p_sid, p_agent, 'trunk', coalesce(p_fence, 0), p_now, p_now)
    ON CONFLICT (session_id) DO UPDATE
        SET fence = coalesce(p_fence, s.fence),
            updated_at = CASE WHEN p_fence IS NULL THEN s.updated_at ELSE p_now END
        WHERE p_fence IS NULL OR s.fence <= p_fence
    RETURNING s.agent, s.active_branch, s.fence, s.created_at
    INTO s_agent, s_active_branch, s_fence, s_created_at;
    IF NOT FOUND THEN
        -- Refused: the first row has no agent, and the stored token.
        SELECT NULL, NULL, s.fence, NULL INTO s_agent, s_active_branch, s_fence, s_created_at
        FROM sessions AS s WHERE s.session_id = p_sid;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN NEXT;
    IF s_created_at = p_now THEN
        -- This call inserted the row (an existing one keeps its creation time): its
        -- trunk, unless a session created at the very same clock reading has one.
        INSERT INTO branches AS b (session_id, branch_id, created_at)
        VALUES (p_sid, 'trunk', p_now) ON CONFLICT (session_id, branch_id) DO NOTHING;
        RETURN;
    END IF;
    IF s_agent <> p_agent THEN
        RETURN;
    END IF;
    r_branch := coalesce(p_bid, s_active_branch);
    -- A statement of its own, after the upsert: its snapshot holds the commit the
    -- upsert waited for. The query is sql/ops.py's _turn_history's.
    RETURN QUERY
    WITH RECURSIVE chain(session_id, branch_id, parent, lo, hi) AS (
        SELECT b.session_id, b.branch_id, b.parent_branch_id, coalesce(b.fork_sequence, 0),
            CAST(NULL AS integer)
        FROM branches AS b WHERE b.session_id = p_sid AND b.branch_id = r_branch
        UNION ALL
        SELECT up.session_id, up.branch_id, up.parent_branch_id,
            coalesce(up.fork_sequence, 0),
            CASE WHEN c.hi IS NULL THEN c.lo WHEN c.lo < c.hi THEN c.lo ELSE c.hi END
        FROM branches AS up, chain AS c
        WHERE up.session_id = p_sid AND up.branch_id = c.parent
    ),
    ranges AS (
        SELECT c.session_id, c.branch_id,
            CASE WHEN c.lo > f.upto THEN c.lo ELSE f.upto END AS lo, c.hi
        FROM chain AS c JOIN (
            SELECT coalesce((
                SELECT found.upto FROM (
                    SELECT c2.lo, (
                        SELECT CASE WHEN sm.summary_of < sm.sequence THEN sm.summary_of
                            ELSE sm.sequence - 1 END
                        FROM messages AS sm
                        WHERE sm.session_id = c2.session_id AND sm.branch_id = c2.branch_id
                            AND sm.sequence > c2.lo AND (c2.hi IS NULL OR sm.sequence <= c2.hi)
                            AND sm.summary_of IS NOT NULL
                        ORDER BY sm.sequence DESC LIMIT 1
                    ) AS upto
                    FROM chain AS c2
                ) AS found
                WHERE found.upto IS NOT NULL ORDER BY found.lo DESC LIMIT 1
            ), 0) AS upto
        ) AS f ON true
    )
    SELECT NULL::varchar, NULL::varchar, NULL::bigint, NULL::double precision,
        m.id, m.session_id, m.branch_id, m.sequence, m.role, m.content, m.name,
        m.tool_calls, m.tool_call_id, m.turn_id, m.created_at, m.reasoning, m.extra,
        m.summary_of, m.parts
    FROM messages AS m JOIN ranges AS r
        ON m.session_id = r.session_id AND m.branch_id = r.branch_id AND m.sequence > r.lo
        AND (r.hi IS NULL OR m.sequence <= r.hi)
    ORDER BY m.sequence;
END
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for signature, body in ((_SIGNATURE, _BODY), (_BEGIN_SIGNATURE, _BEGIN_BODY)):
        op.execute(
            f"CREATE OR REPLACE FUNCTION {signature}\nLANGUAGE plpgsql VOLATILE AS $reactq$"
            f"{body}$reactq$"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS reactq_begin_turn")
    op.execute("DROP FUNCTION IF EXISTS reactq_commit_turn")
