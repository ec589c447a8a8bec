"""RedisStateStore: the shared state in Redis, every operation one atomic Lua script.

Layout under the namespace (the session id in a hash tag, as in ``shared.keys``,
so one session's keys share a cluster slot and one script may touch them all)::

    <ns>:s:{<sid>}:state            hash  v, agent, active, fence, created_at, updated_at
    <ns>:s:{<sid>}:state:branches   hash  p:<b> parent, f:<b> fork, l:<b> length, c:<b> created,
                                          s:<b> its summaries (state_history.lua)
    <ns>:s:{<sid>}:state:messages   hash  <b>|<sequence> -> message JSON
    <ns>:s:{<sid>}:state:turns      hash  turn_id -> turn record JSON
    <ns>:s:{<sid>}:state:steps      hash  turn_id -> checkpoint JSON (a running turn's steps)
    <ns>:s:{<sid>}:state:metadata   hash  key -> JSON value (the application's metadata)
    <ns>:state:turn:<turn_id>       string  the turn's session (to find a turn by id)
    <ns>:state:sessions             sorted set  ``<created_at>|<sid>``, all scores 0 (listing)

The listing's index is not in a session's slot, so it is written beside the
script that creates a session, not in it: a session created by a process that
died between the two is not listed (nor is one created before 0.2.0).

Each operation is a script ``state_<op>.lua`` in this package (after the preludes
it names), read once at import by the module that runs it: this one, or its parts
mixed into the store (``documents``, ``todos``, ``steps``; ``files`` and
``schedules`` need none). A script gets the session's keys in that
order (KEYS[1] the state hash, KEYS[2] the branches, KEYS[3] the messages, KEYS[4]
the turn records); branch ``b``'s own message ``n`` is the field ``b|n`` of the
messages hash. A script
returns an error as ``{code, ...}`` for Python to raise, never as a Lua error,
so that nothing is half-written.

Records carry a schema version (``v``; ``records``); a reader refuses a newer one. Text a UTF-8
codec refuses (lone surrogates, NUL) is stored escaped (``shared.state.text``, as
the SQL store does) and read back as it was.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from redis.asyncio import Redis

from reactq.shared.errors import (
    BranchError,
)
from reactq.shared.messages import ChatMessage
from reactq.shared.redis_client import connect, lua_source
from reactq.shared.redis_urls import is_cluster_url
from reactq.shared.state import listing
from reactq.shared.state.base import (
    BranchInfo,
    SessionInfo,
    SessionPage,
    SessionRecord,
    SessionUsage,
    TurnRecord,
    TurnStart,
)
from reactq.shared.state.common import (
    check_branch_id,
    check_fork_point,
    check_record,
    committed_twice,
    new_branch_id,
    stale,
)
from reactq.shared.state.redis import records
from reactq.shared.state.redis.documents import RedisDocuments
from reactq.shared.state.redis.files import RedisFiles
from reactq.shared.state.redis.steps import CHECKPOINT, RedisSteps
from reactq.shared.state.redis.todos import RedisTodos

_ENSURE = lua_source(__name__, "state_ensure")
_WRITE = lua_source(__name__, "state_branches", "state_write")
_READ = lua_source(__name__, "state_branches", "state_history", "state_read")
_BEGIN = lua_source(__name__, "state_branches", "state_history", "state_begin")
_FORK = lua_source(__name__, "state_branches", "state_fork")
_SWITCH = lua_source(__name__, "state_switch")
_TRUNCATE = lua_source(__name__, "state_branches", "state_truncate")
_CLAIM = lua_source(__name__, "state_claim")
_METADATA = lua_source(__name__, "state_metadata")
_DELETE = lua_source(__name__, "state_delete")
_LIST_BATCH = 200


class RedisStateStore(RedisDocuments, RedisTodos, RedisSteps, RedisFiles):
    """The StateStore contract on Redis (redis-py asyncio); see the module docstring.

    ``await RedisStateStore.open("redis://host:6379/0?namespace=reactq")``, or pass
    a client you own (``redis=``; the store then does not close it).
    """

    backend: ClassVar[str] = "redis"
    """Its entry in ``shared/state/backends.py``."""

    def __init__(
        self, url: str | None = None, *, redis: Redis | None = None, namespace: str = "reactq"
    ) -> None:
        if (url is None) == (redis is None):
            raise ValueError("give exactly one of url and redis")
        self.namespace = namespace
        self._owns_client = redis is None
        if redis is None:
            assert url is not None
            parts = urlsplit(url)
            query = parse_qs(parts.query)
            if "namespace" in query:
                self.namespace = query.pop("namespace")[0]
            rest = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
            plain = urlunsplit(parts._replace(query=rest))
            # A cluster client caps its connections per node: set it above any pool's need.
            redis = connect(plain, 1000) if is_cluster_url(plain) else Redis.from_url(plain)
        self.redis = redis
        self._ensure = redis.register_script(_ENSURE)
        self._write_script = redis.register_script(_WRITE)
        self._read_script = redis.register_script(_READ)
        self._begin = redis.register_script(_BEGIN)
        self._fork = redis.register_script(_FORK)
        self._switch = redis.register_script(_SWITCH)
        self._truncate = redis.register_script(_TRUNCATE)
        self._claim = redis.register_script(_CLAIM)
        self._checkpoint = redis.register_script(CHECKPOINT)
        self._metadata = redis.register_script(_METADATA)
        self._delete = redis.register_script(_DELETE)

    @classmethod
    async def open(cls, url: str, **kwargs: Any) -> RedisStateStore:
        """A store connected to ``url`` (checked with a PING)."""
        store = cls(url, **kwargs)
        try:
            await store.redis.ping()
        except BaseException:
            await store.close()
            raise
        return store

    def _keys(self, session_id: str) -> list[str]:
        base = f"{self.namespace}:s:{{{session_id}}}:state"
        return [
            base,
            f"{base}:branches",
            f"{base}:messages",
            f"{base}:turns",
            f"{base}:steps",
            f"{base}:metadata",
        ]

    @property
    def _index(self) -> str:
        return f"{self.namespace}:state:sessions"

    async def _indexed(self, session_id: str, created: Any, now: str) -> None:
        """List the session if the script that returned ``created`` created it."""
        created = created.decode() if isinstance(created, bytes) else str(created)
        if created == now:
            await self.redis.zadd(
                self._index, {records.member(float(created), session_id): 0}, nx=True
            )

    def _turn_index(self, turn_id: str) -> str:
        return f"{self.namespace}:state:turn:{turn_id}"

    # --- the protocol -------------------------------------------------------------

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        now = repr(time.time())
        row = await self._ensure(
            keys=self._keys(session_id)[:2], args=[agent, now, records.RECORD_VERSION]
        )
        await self._indexed(session_id, row[4], now)
        # As get_session reports it (its metadata too); the script's row if it was
        # deleted meanwhile.
        return await self.get_session(session_id) or records.session_info(session_id, row)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None if the store has never seen it."""
        return (await self._records([session_id]))[0]

    async def _records(self, session_ids: Sequence[str]) -> list[SessionRecord | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                keys = self._keys(session_id)
                pipe.hmget(keys[0], ["v", "agent", "active", "fence", "created_at", "updated_at"])
                pipe.hgetall(keys[5])
            replies = await pipe.execute()
        out: list[SessionRecord | None] = []
        for n, session_id in enumerate(session_ids):
            row, metadata = replies[2 * n], replies[2 * n + 1]
            if row[0] is None:
                out.append(None)
                continue
            info = records.session_info(session_id, row[:5])
            out.append(
                SessionRecord(
                    **dict(info),
                    updated_at=float(row[5] or info.created_at),
                    metadata={records.text(k): json.loads(v) for k, v in metadata.items()},
                )
            )
        return out

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Sessions newest first, filtered, a page at a time; see StateStore. The
        index gives the order; the filters run here, on the sessions read in batches."""
        limit = listing.check_limit(limit)
        after = listing.decode_cursor(cursor)
        start = "+" if after is None else "(" + records.member(*after)

        async def newest_first() -> AsyncIterator[SessionRecord]:
            nonlocal start
            while True:
                found: list[Any] = await self.redis.zrange(
                    self._index, start, "-", desc=True, bylex=True, offset=0, num=_LIST_BATCH
                )
                members = [records.text(m) for m in found]
                ids = [m.partition("|")[2] for m in members]
                for member, record in zip(members, await self._records(ids), strict=True):
                    if record is None:  # deleted since: drop it from the index
                        await self.redis.zrem(self._index, member)
                        continue
                    yield record
                if len(members) < _LIST_BATCH:
                    return
                start = "(" + members[-1]

        return await listing.collect(
            newest_first(),
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=limit,
        )

    async def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata, in one script; see StateStore."""
        patch = listing.check_metadata(patch)
        setting = [(k, listing.dump_value(v)) for k, v in patch.items() if v is not None]
        removing = [k for k, v in patch.items() if v is None]
        keys = self._keys(session_id)
        reply = records.texts(
            await self._metadata(
                keys=[keys[0], keys[5]],
                args=[
                    repr(time.time()),
                    len(setting),
                    *(part for pair in setting for part in pair),
                    *removing,
                ],
            )
        )
        records.raise_for(session_id, reply)
        pairs = reply[1:]
        return {pairs[i]: json.loads(pairs[i + 1]) for i in range(0, len(pairs), 2)}

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session's keys, its turns' index entries and its listing entry."""
        reply = [records.text(x) for x in await self._delete(keys=self._keys(session_id))]
        todos = bool(await self.redis.delete(self._todos_key(session_id)))
        created, turn_ids = reply[0], reply[1:]
        for turn_id in turn_ids:
            # One at a time: on a cluster each index key has its own slot.
            await self.redis.delete(self._turn_index(turn_id))
        filed = [records.text(t) for t in await self.redis.smembers(self._file_turns(session_id))]
        for turn_id in filed:  # the files' old contents go with their workspace
            await self.redis.delete(*self._file_keys(turn_id))
        await self.redis.delete(self._file_turns(session_id))
        if created:
            await self.redis.zrem(self._index, records.member(float(created), session_id))
        return bool(created or turn_ids or todos or filed)

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's committed turns, oldest first."""
        raw = await self.redis.hvals(self._keys(session_id)[3])
        found = [records.turn_record(value) for value in raw]
        return sorted(found, key=lambda r: (r.created_at, r.turn_id))

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        raw = await self._read_script(keys=self._keys(session_id)[:3], args=[branch_id or ""])
        return [records.message_of(value, i + 1) for i, value in enumerate(raw)]

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""
        await self._write(session_id, messages, branch_id, None, None)

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch_id: str | None = None,
        new_branch_id: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence``; see StateStore.fork."""
        new_id = check_branch_id(new_branch_id) if new_branch_id else _new_branch()
        check_fork_point(session_id, branch_id or "", from_sequence, max(from_sequence, 0))
        reply = records.texts(
            await self._fork(
                keys=self._keys(session_id)[:2],
                args=[branch_id or "", from_sequence, new_id, repr(time.time()), int(activate)],
            )
        )
        if reply[0] == "range":
            check_fork_point(session_id, reply[1], from_sequence, int(reply[2]))
        if reply[0] == "exists":
            raise BranchError(
                f"session {session_id!r} already has a branch {new_id!r}",
                session_id=session_id,
                branch_id=new_id,
            )
        records.raise_for(session_id, reply)
        return new_id

    async def list_branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first ([] for an unknown session)."""
        keys = self._keys(session_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(keys[0], "active")
            pipe.hgetall(keys[1])
            active, fields = await pipe.execute()
        if active is None:
            return []
        active = active.decode()
        data = {k.decode(): v.decode() for k, v in fields.items()}
        names = [k[2:] for k in data if k.startswith("l:")]
        out = [
            BranchInfo(
                branch_id=name,
                parent_branch_id=data.get(f"p:{name}"),
                fork_sequence=int(data[f"f:{name}"]),
                length=int(data[f"l:{name}"]),
                active=name == active,
                created_at=float(data.get(f"c:{name}", 0.0)),
            )
            for name in names
        ]
        return sorted(out, key=lambda b: (b.created_at, b.parent_branch_id is not None))

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the active branch (BranchNotFoundError if it has none)."""
        reply = await self._switch(keys=self._keys(session_id)[:2], args=[branch_id])
        records.raise_for(session_id, records.texts(reply))

    async def truncate_after(
        self, session_id: str, sequence: int, branch_id: str | None = None
    ) -> None:
        """Hard-delete a branch's own messages after ``sequence``; see StateStore."""
        await self._truncate(keys=self._keys(session_id)[:3], args=[branch_id or "", sequence])

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token (StaleLeaseError if older).

        A session the store does not have yet is left alone (nothing to fence).
        """
        reply = records.texts(await self._claim(keys=self._keys(session_id)[:1], args=[fence]))
        if reply[0] == "stale":
            raise stale(session_id, int(reply[1]), fence)

    async def begin_turn(
        self, session_id: str, agent: str, *, fence: int | None = None, branch_id: str | None = None
    ) -> TurnStart:
        """Ensure the session, record ``fence`` and read a branch, in one script; see
        StateStore.begin_turn."""
        now = repr(time.time())
        reply = await self._begin(
            keys=self._keys(session_id)[:3],
            args=[
                agent,
                now,
                records.RECORD_VERSION,
                "" if fence is None else fence,
                branch_id or "",
            ],
        )
        head = records.texts(reply[:8])
        if head[0] == "stale" and fence is not None:
            raise stale(session_id, int(head[1]), fence)
        await self._indexed(session_id, head[5], now)
        floor = int(head[7])  # the read starts after what the latest summary stands for
        return TurnStart(
            info=records.session_info(session_id, head[1:6]),
            branch_id=head[6],
            messages=[
                records.message_of(value, floor + i + 1) for i, value in enumerate(reply[8:])
            ],
        )

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
        branch_id: str | None = None,
        *,
        drop_checkpoint: bool = True,
    ) -> None:
        """Append a turn's messages and record its outcome, atomically, once per turn
        (TurnCommittedError otherwise); see StateStore.

        Messages without a ``turn_id`` get the record's.
        """
        check_record(session_id, record)
        if not record.created_at:
            record = record.model_copy(update={"created_at": time.time()})
        # The index first: a crash between the two leaves a pointer to nothing
        # (get_turn: None), never a committed turn that cannot be found. The script
        # refuses a turn its session has a record of; one that another session
        # committed (the index points there) it refuses too, after the fence check,
        # as the other backends do.
        index = self._turn_index(record.turn_id)
        elsewhere = False
        if not await self.redis.set(index, session_id, nx=True):
            found = await self.get_turn(record.turn_id)
            elsewhere = found is not None and found.session_id != session_id
            if not elsewhere:
                await self.redis.set(index, session_id)
        await self._write(
            session_id, messages, branch_id, record, fence, elsewhere, drop_checkpoint
        )

    async def _write(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        branch_id: str | None,
        record: TurnRecord | None,
        fence: int | None,
        committed_elsewhere: bool = False,
        drop_checkpoint: bool = True,
    ) -> None:
        now = time.time()
        turn_id = record.turn_id if record is not None else None
        args: list[Any] = [
            branch_id or "",
            "" if fence is None else fence,
            turn_id or "",
            "" if record is None else records.dump_record(record),
            repr(now),
            int(committed_elsewhere),
            int(not drop_checkpoint),
            records.summary_marks(messages),
            *(records.dump_message(m, turn_id, now) for m in messages),
        ]
        reply = await self._write_script(keys=self._keys(session_id), args=args)
        texts = records.texts(reply)
        if texts[0] == "stale" and fence is not None:
            raise stale(session_id, int(texts[1]), fence)
        if texts[0] == "committed" and turn_id is not None:
            raise committed_twice(session_id, turn_id)
        records.raise_for(session_id, texts)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""
        session_id = await self.redis.get(self._turn_index(turn_id))
        if session_id is None:
            return None
        owner = session_id.decode() if isinstance(session_id, bytes) else str(session_id)
        raw = await self.redis.hget(self._keys(owner)[3], turn_id)
        return None if raw is None else records.turn_record(raw)

    async def session_usage(self, session_id: str) -> SessionUsage:
        """The session's totals over its committed turns; see StateStore."""
        return SessionUsage.of(session_id, await self.list_turns(session_id))

    async def close(self) -> None:
        """Close the client (if the store made it)."""
        if self._owns_client:
            await self.redis.aclose()


def _new_branch() -> str:
    return new_branch_id()
