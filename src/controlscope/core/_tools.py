"""The environment's tool server as the controller sees it: schemas in, results out.

A :class:`ToolServer` is what an environment starts for one workspace (paper section A.1: "the
environment server receives a separate task workspace for each branch"). The worker's tool proxies
are generated from :meth:`ToolServer.list_tools`; every primitive call that the controller lets
through is made with :meth:`ToolServer.call`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class ToolAnnotations(BaseModel):
    """The hints an MCP server gives about a tool (MCP's ``ToolAnnotations``; the field names of
    the ``mcp`` SDK). None is a hint the tool does not give; MCP's defaults then apply (see
    :meth:`risk`).

    Attributes:
        read_only_hint: ``readOnlyHint``: the tool does not change its environment (default
            false).
        destructive_hint: ``destructiveHint``: the tool may make destructive updates, meaningful
            only when it is not read-only (default true).
        idempotent_hint: ``idempotentHint``: calling it twice with the same arguments has no
            further effect, meaningful only when it is not read-only (default false).
        open_world_hint: ``openWorldHint``: the tool reaches an open world (default true).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    def risk(self) -> ToolRisk:
        """Whether a call of this tool is one a server marks destructive or not read-only.

        With MCP's defaults (a hint not given: ``readOnlyHint`` false, ``destructiveHint``
        true), a tool is risky unless it declares ``readOnlyHint: true``; a read-only tool that
        also declares ``destructiveHint: true`` is risky too (the server says so).

        Returns:
            The verdict and the hints it rests on, each marked as given or MCP's default.
        """
        read_only = bool(self.read_only_hint)
        destructive = True if self.destructive_hint is None else self.destructive_hint
        idempotent = bool(self.idempotent_hint)

        def hint(name: str, value: bool, given: bool | None) -> str:
            return f"{name} {str(value).lower()}" + ("" if given is not None else " (default)")

        words = [hint("readOnlyHint", read_only, self.read_only_hint)]
        if not read_only or self.destructive_hint:
            words.append(hint("destructiveHint", destructive, self.destructive_hint))
        if not read_only:
            words.append(hint("idempotentHint", idempotent, self.idempotent_hint))
        risky = not read_only or self.destructive_hint is True
        return ToolRisk(risky=risky, hints=", ".join(words))


class ToolRisk(BaseModel):
    """How a schedule that reads tool annotations judged a pending call (recorded on its
    boundary).

    Attributes:
        risky: the tool is marked destructive or not read-only, so the call goes to review
            (unless another part of the schedule holds it back).
        hints: the hints the verdict rests on, e.g. ``readOnlyHint false (default),
            destructiveHint true (default), idempotentHint false (default)``; ``(default)``
            marks a hint the tool does not give.
    """

    model_config = ConfigDict(frozen=True)

    risky: bool
    hints: str


class ToolSchema(BaseModel):
    """One tool of an environment server.

    Attributes:
        name: the tool's name, which is also the proxy function's name in agent code.
        description: the server's description; becomes the proxy's docstring.
        input_schema: the tool's JSON schema for its arguments (an ``object`` schema).
        code_params: names of parameters whose values are executable programs. Patches to them
            fall outside the data-argument comparison (paper section 3.1) and are rejected.
        annotations: the hints its server gives (MCP tool annotations); None when it gives
            none (MCP's defaults: not read-only, destructive).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    code_params: tuple[str, ...] = ()
    annotations: ToolAnnotations | None = None


class ToolResult(BaseModel):
    """The observation a primitive call returns.

    Attributes:
        text: the text content of the result, concatenated.
        is_error: true when the server reported a tool error (bad path, bad arguments...).
        structured: the server's structured content, if any.
        elapsed_ms: wall time of the call as seen by the controller, in milliseconds.
    """

    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = None
    elapsed_ms: float = 0.0


class ToolServerError(RuntimeError):
    """The tool server could not be reached, died, or broke the protocol (not a tool error)."""


class ToolCallTimeout(ToolServerError):
    """A primitive call got no answer within the time it was given (the server may still be
    working on it); the server itself is still usable."""


@runtime_checkable
class ToolServer(Protocol):
    """A running environment server, used synchronously by the controller.

    Attributes:
        agent_roots: the paths agent code uses for the workspace (the same in every branch when
            the environment confines its server to a fixed root); empty when the server has no
            notion of a workspace root.
        server_info: the server's name and version as it reports them (``{"name": ...,
            "version": ...}``), recorded in ``run_start``; empty when it reports none.
    """

    agent_roots: tuple[str, ...]
    server_info: dict[str, str]

    def list_tools(self) -> list[ToolSchema]:
        """Return the server's tools, in the server's order."""
        ...

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """Make one primitive call.

        Args:
            name: the tool's name.
            arguments: its arguments (plain JSON data).
            timeout_s: seconds to wait for the answer (the rest of the run's execution budget);
                None: the server's own default.

        Raises:
            ToolCallTimeout: no answer within ``timeout_s``.
            ToolServerError: on transport failure or a dead server. Tool errors are results with
                ``is_error`` set, never exceptions.
        """
        ...

    def close(self) -> None:
        """Stop the server and release its resources; safe to call twice."""
        ...
