"""The session protocol: how a turn travels from a producer to a worker and ends.

One owner for the whole lifecycle (docs/architecture.md, "Session protocol");
``reactq.producer`` and ``reactq.worker`` both use it and neither re-implements
a step of it:

=================  ==============================================================
``queue``          the session's pending list, running slot and turn statuses
``lease``          who runs a session's turns, with a fencing token
``deadlines``      when the reaper must look at a session (the deadline set)
``steps``          a running turn's checkpointed steps, beside its running slot
``approvals``      a turn parked while tool calls wait for a person's decision
``children``       a turn that delegated to other agents, and the child turns
``dispatch``       the Celery app and the ``reactq.drain`` message
``transport``      the worker's Redis broker transport, hardened for restarts
``control``        cancel modes and the notices that stop a running turn
``endings``        every ``final`` event the protocol publishes itself
``workers``        which agents the pool hosts (and their tools), which workers are up
``outcomes``       the typed results of submit, claim and cancel
``ratelimit``      the pool's shared rate limit: a token bucket per endpoint and model
=================  ==============================================================

Each Redis operation is a Lua script in a ``.lua`` file beside its module, read
once at import. Import from the modules: this package re-exports nothing, so that
importing one module loads that module alone. Celery is imported only where an
app is made (``dispatch.celery_app``), kombu's Redis transport only by a worker's.
"""
