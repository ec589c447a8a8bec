"""Who a turn acts for: the identity of the API key that submitted it.

The gateway stamps its caller's key onto every turn it submits
(``TurnRequest.tenant``), a field of its own that no body field and no metadata can
set; a Python producer, which is trusted, may pass one (``Producer.submit(...,
tenant=...)``). It travels with the turn to the worker, into the ``ToolContext`` of
every call, to the child turns the turn delegates to and from a schedule to the turns
it fires. The same object is a key's scope in the gateway (``KeyScope``, in
``producer/gateway/security.py``), so the gateway's routes and the worker's store tools
decide "is this the tenant's?" with the same methods.

A tenant's namespaces in the long-term store are those whose dotted name starts with
its prefix (``acme-users.alice`` for ``prefix=acme-``), as its sessions are those whose
id does; the store tools put every namespace they open under the prefix
(``shared/state/document_store.py``, ``TenantDocuments``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["TenantIdentity"]


class TenantIdentity(BaseModel):
    """An API key's identity and scope: who it is and what it may reach."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The key's name (``REACTQ_API_KEYS``): the decider recorded for its approvals."""
    prefix: str | None = None
    """Only sessions whose id, and store namespaces whose dotted name, start with it
    (None: every one)."""
    agents: frozenset[str] | None = None
    """Only these agents' sessions and turns (None: any agent's)."""
    read_only: bool = False
    """True: every write is refused."""

    @property
    def unrestricted(self) -> bool:
        """True for a key without scopes (full access)."""
        return self.prefix is None and self.agents is None and not self.read_only

    def sees_session(self, session_id: str) -> bool:
        """True when the session id is the tenant's (its prefix only: which agent a
        session belongs to is a look-up, ``may_run``)."""
        return self.prefix is None or session_id.startswith(self.prefix)

    def sees_namespace(self, namespace: str) -> bool:
        """True when the long-term store's namespace (dotted) is the tenant's: its
        dotted name starts with the prefix, as a session id does."""
        return self.prefix is None or namespace.startswith(self.prefix)

    def may_run(self, agent: str) -> bool:
        """True when the key may reach ``agent``: submit to it, read its sessions."""
        return self.agents is None or agent in self.agents
