"""``@tool``: a typed Python function the model can call.

The function's signature is the contract: its type hints become the JSON Schema
the model sees, and the same pydantic model validates the arguments the model
sends before the function runs. A parameter annotated ``ToolContext`` is filled
in by the loop and never shown to the model.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from reactq.shared.catalogue import ToolCategory, ToolInfo, ToolSource
from reactq.shared.errors import ToolError
from reactq.shared.tenancy import TenantIdentity
from reactq.worker.agent.tools.progress import report

if TYPE_CHECKING:
    from reactq.shared.bus import TurnEmitter
    from reactq.shared.state.base import StateStore

__all__ = ["PromptSection", "Tool", "ToolArgumentsError", "ToolCategory", "ToolContext", "tool"]

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_EMPTY_CODE = (lambda: None).__code__


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves (inject it by annotation)."""

    session_id: str = ""
    """The conversation the call belongs to."""
    turn_id: str = ""
    """The turn; with ``attempt`` it lets a tool make its side effects idempotent."""
    attempt: int = 1
    """Which run of the turn (a turn is re-run after a lost worker)."""
    resumed: bool = False
    """True when an earlier attempt started this very call and did not record its
    result (its worker died): the call may have had side effects already. Calls
    whose results were recorded never run again."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """The turn's context, as the producer passed it (``submit(..., context=...)``):
    the tenant, the user, whatever the tools need to know whom they act for."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The turn's metadata, as the producer passed it."""
    agent: str = ""
    """The agent that runs the turn."""
    store: StateStore | None = field(default=None, repr=False, compare=False)
    """The state store the turn runs against (None outside a runner): what tools that
    keep per-session records across workers (the todo list) read and write."""
    emitter: TurnEmitter | None = field(default=None, repr=False, compare=False)
    """Publishes events on the turn's stream (None outside a run)."""
    fence: int | None = None
    """The token of the session's lease this run holds (None: unfenced, outside a
    pool): what tools that write the ``store`` pass, so that a worker that lost the
    lease writes nothing (the todo list)."""
    tenant: TenantIdentity | None = None
    """Who the turn acts for: the API key that submitted it through the gateway (or
    what a Python producer passed), never what its ``metadata`` or ``context`` say.
    The memory tools keep to its namespaces; a tool of its own that opens the
    long-term store does so through ``TenantDocuments(store, ctx.tenant)``
    (``shared/state/document_store.py``)."""

    async def progress(
        self,
        message: str = "",
        fraction: float | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Say how far the call got: a ``tool_progress`` event on the turn's stream
        (``fraction`` from 0 to 1 when the tool knows; ``data`` anything JSON-able).
        At most one every 0.25 s per call, the newest kept when they come faster;
        nothing outside a run. It never fails the tool."""
        await report(message, fraction, data)


PromptSection: TypeAlias = Callable[[ToolContext], Awaitable[str | None]]
"""Text a tool adds to the system prompt of every model call (``Tool(prompt_section=...)``):
called before each call with the turn's context; None or "" adds nothing."""


class ToolArgumentsError(ToolError):
    """The model's arguments do not fit the tool's schema."""

    code = "invalid_arguments"


class Tool:
    """A callable the model can use: name, description, JSON Schema and ``call``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        writes: bool | None = None,
        read_only: bool = False,
        requires_approval: bool = False,
        category: ToolCategory | str | None = None,
        source: ToolSource | None = None,
        origin: str | None = None,
        prompt_section: PromptSection | None = None,
    ) -> None:
        self.fn = fn
        self.category: ToolCategory = _category(category, writes, read_only, name or fn.__name__)
        """READ, WRITE or META: only READ tools of one step run side by side. WRITE
        unless declared otherwise: a tool nobody said is safe to overlap runs alone."""
        inferred, module = _source_of(fn)
        self.source: ToolSource = source or inferred
        """Where the tool comes from (local, bundle, mcp, builtin)."""
        self.origin: str | None = origin if origin is not None else module
        """The bundle or MCP server it comes from (None for a local tool)."""
        self.prompt_section: PromptSection | None = prompt_section
        """Adds to the system prompt of every model call (its todo list, for one)."""
        self.requires_approval = bool(requires_approval)
        """True when every call waits for a person's decision before it runs (the turn is
        parked meanwhile: see ``Producer.approve``)."""
        self.name: str = name or fn.__name__
        if not TOOL_NAME_RE.fullmatch(self.name):
            raise ValueError(
                f"tool name {self.name!r} is invalid: use 1-64 characters from [A-Za-z0-9_-]"
            )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"tool {self.name!r}: timeout must be > 0 or None, got {timeout!r}")
        self.description: str = description or _first_paragraph(inspect.getdoc(fn)) or ""
        self.timeout: float | None = timeout
        self._is_async = inspect.iscoroutinefunction(fn)
        self._args_model, self._context_params = _arguments_model(fn, self.name)
        # Resolved once: reading model_fields on every call costs more than the call.
        self._fields = [
            (key, field.alias or key) for key, field in self._args_model.model_fields.items()
        ]
        # The model's validator itself: model_validate is a Python frame around it.
        self._validate = self._args_model.__pydantic_validator__.validate_python
        self.parameters: dict[str, Any] = _clean_schema(self._args_model.model_json_schema())
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    @property
    def writes(self) -> bool:
        """True unless the tool is READ: it then runs alone, never alongside others."""
        return self.category is not ToolCategory.READ

    def info(self) -> ToolInfo:
        """The tool as the catalogue lists it."""
        return ToolInfo(
            name=self.name,
            description=self.description,
            category=self.category,
            source=self.source,
            origin=self.origin,
            parameters=self.parameters,
            requires_approval=self.requires_approval,
            timeout=self.timeout,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation), as if undecorated."""
        return self.fn(*args, **kwargs)

    def openai_schema(self) -> dict[str, Any]:
        """The tool in the Chat Completions ``tools`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments for the function; raises ToolArgumentsError."""
        try:
            model = self._validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: {problems}", tool=self.name
            ) from None
        # Attribute access (not model_dump) keeps nested models and dataclasses as objects.
        return {alias: getattr(model, key) for key, alias in self._fields}

    async def call(self, args: dict[str, Any], ctx: ToolContext | None = None) -> Any:
        """Validate ``args`` and run the function (sync functions run in a thread)."""
        kwargs = self.validate(args)
        for param in self._context_params:
            kwargs[param] = ctx if ctx is not None else ToolContext()
        if self._is_async:
            return await self.fn(**kwargs)
        # A thread, so a blocking tool does not stall every other turn on the loop.
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    writes: bool | None = None,
    read_only: bool = False,
    requires_approval: bool = False,
    category: ToolCategory | str | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    writes: bool | None = None,
    read_only: bool = False,
    requires_approval: bool = False,
    category: ToolCategory | str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a Tool; use as ``@tool`` or ``@tool(name=..., read_only=True)``.

    ``category`` is READ, WRITE or META (``ToolCategory``). A tool is WRITE unless
    declared otherwise: ``read_only=True`` (shorthand for ``category=ToolCategory.READ``,
    as is ``writes=False``) makes it READ; ``writes=True`` is ``category=ToolCategory.WRITE``;
    knobs that disagree raise ValueError. Consecutive calls of READ tools in one step
    run concurrently; the others run alone, in the order the model asked. An agent
    may expose only some categories (``Agent(tool_categories=...)``). A tool marked
    ``requires_approval=True`` runs only once a person approved the call; on the
    worker pool the turn waits parked, holding no worker, until then.

    The description defaults to the docstring's first paragraph; parameter
    descriptions come from ``Annotated[T, Field(description=...)]`` or from an
    ``Args:`` section of the docstring.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            writes=writes,
            read_only=read_only,
            requires_approval=requires_approval,
            category=category,
        )

    return wrap(fn) if fn is not None else wrap


def _category(
    category: ToolCategory | str | None, writes: bool | None, read_only: bool, name: str
) -> ToolCategory:
    """The tool's category: the one its knobs declare, else WRITE (the safe default:
    a tool that may change the world never overlaps another call). ValueError names
    an unknown category, or two knobs that disagree."""
    # Each knob given, and whether it says the tool only reads.
    declared: list[tuple[str, bool]] = []
    found: ToolCategory | None = None
    if category is not None:
        try:
            found = ToolCategory(category)
        except ValueError:
            known = ", ".join(c.value for c in ToolCategory)
            raise ValueError(f"tool {name!r}: unknown category {category!r}: use {known}") from None
        declared.append((f"category={found.name}", found is ToolCategory.READ))
    if read_only:
        declared.append(("read_only=True", True))
    if writes is not None:
        declared.append((f"writes={bool(writes)}", not writes))
    for knob, reads in declared[1:]:
        first, first_reads = declared[0]
        if reads is not first_reads:
            raise ValueError(
                f"tool {name!r}: {knob} conflicts with {first}: give one of them "
                "(read_only=True for a tool that only reads, writes=True or a category "
                "otherwise)"
            )
    if found is not None:
        return found
    return ToolCategory.READ if declared and declared[0][1] else ToolCategory.WRITE


def _source_of(fn: Callable[..., Any]) -> tuple[ToolSource, str | None]:
    """Where a function comes from, by its module: a bundle (and which), reactq's own
    code, or the agent's."""
    module = getattr(fn, "__module__", None) or ""
    if module.startswith("reactq.bundles."):
        return "bundle", module.removeprefix("reactq.bundles.").split(".")[0]
    if module.startswith("reactq."):
        return "builtin", None
    return "local", None


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _arg_docs(doc: str | None) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    out: dict[str, str] = {}
    if not doc:
        return out
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?|\s*\n)+)", doc, re.M)
    if not match:
        return out
    for line in match.group(1).splitlines():
        m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _arguments_model(fn: Callable[..., Any], tool_name: str) -> tuple[type[BaseModel], list[str]]:
    """A pydantic model of the function's parameters, and the ToolContext parameters."""
    signature = inspect.signature(fn)
    # Only the parameters matter: a return annotation naming a type that cannot
    # be resolved here (a local class, a TYPE_CHECKING import) must not break it.
    params_only: Any = fn
    if inspect.isfunction(fn):
        params_only = types.FunctionType(_EMPTY_CODE, fn.__globals__)  # same globals, no closure
        params_only.__annotations__ = {
            k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != "return"
        }
    try:
        hints = typing.get_type_hints(params_only, include_extras=True)
    except Exception as exc:  # unresolvable forward references
        raise ValueError(f"tool {tool_name!r}: cannot resolve type hints: {exc}") from exc
    docs = _arg_docs(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    context_params: list[str] = []
    for index, (pname, param) in enumerate(signature.parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(
                f"tool {tool_name!r}: *args/**kwargs cannot be described to the model; "
                f"declare each parameter"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ValueError(f"tool {tool_name!r}: positional-only parameter {pname!r}")
        annotation = hints.get(pname, Any)
        if _is_context(annotation):
            context_params.append(pname)
            continue
        default = ... if param.default is param.empty else param.default
        # Internal field names avoid clashes with BaseModel attributes ("schema",
        # "json", leading underscores); the alias is what the model sees.
        # Only pass a description we have: an explicit None would override one
        # given through Annotated[T, Field(description=...)].
        info = (
            Field(default, alias=pname, description=docs[pname])
            if pname in docs
            else Field(default, alias=pname)
        )
        fields[f"p{index}"] = (annotation, info)
    model = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
        **fields,
    )
    return model, context_params


def _is_context(annotation: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext | None`` and ``Annotated[ToolContext, ...]``."""
    if annotation is ToolContext:
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return bool(args) and all(a is ToolContext for a in args)
    return False


def _clean_schema(schema: Any, in_properties: bool = False) -> Any:
    """Drop pydantic's auto ``title`` keys (noise to the model), keeping properties named so."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and not in_properties and isinstance(value, str):
                continue
            out[key] = _clean_schema(value, in_properties=key in ("properties", "$defs"))
        return out
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema
