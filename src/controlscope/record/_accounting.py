"""Token accounting by role, keeping logical totals apart from uncached ones (paper A.5).

*Logical* totals count every response a trajectory used, including those served from the
exact-request cache and those replayed from a recorded run: they describe the model work the
trajectories represent ("logical token totals include replayed responses", B.2). *Uncached*
totals count only successful responses the model actually produced in this run: a narrower
component of actual API use. Cache hits and replayed responses are counted apart (A.5: "reused
Keep trajectories and cached model responses are identified in resource accounting"). Failed
requests are counted apart and enter neither total.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, Field

from controlscope.core import ModelResponse

__all__ = ["LedgerSummary", "RoleTotals", "TokenLedger", "TokenTotals"]


class TokenTotals(BaseModel):
    """Sums over a set of responses.

    Attributes:
        requests: responses counted.
        input_tokens: prompt tokens sent.
        output_tokens: tokens generated.
        cached_tokens: prompt tokens the provider (or the local model's KV-prefix reuse) did not
            re-evaluate; a subset of ``input_tokens``.
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def add(self, response: ModelResponse) -> None:
        """Count one response."""
        self.requests += 1
        self.input_tokens += response.usage.input_tokens
        self.output_tokens += response.usage.output_tokens
        self.cached_tokens += response.usage.cached_tokens

    def merged(self, other: TokenTotals) -> TokenTotals:
        """Return the sum of two totals."""
        return TokenTotals(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class RoleTotals(BaseModel):
    """The account of one role (planner, reviewer, other) or of all roles.

    Attributes:
        logical: every successful response, cached, replayed or not.
        uncached: successful responses the model produced (neither cached nor replayed).
        cache_hits: responses served from the exact-request cache.
        replayed: responses answered from a recorded run (``logical.requests`` is
            ``uncached.requests + cache_hits + replayed``).
        failed_requests: requests that ended in a :class:`ProviderError`.
        latency_s: summed wall seconds of the uncached responses.
    """

    logical: TokenTotals = Field(default_factory=TokenTotals)
    uncached: TokenTotals = Field(default_factory=TokenTotals)
    cache_hits: int = 0
    replayed: int = 0
    failed_requests: int = 0
    latency_s: float = 0.0

    def merged(self, other: RoleTotals) -> RoleTotals:
        """Return the sum of two accounts."""
        return RoleTotals(
            logical=self.logical.merged(other.logical),
            uncached=self.uncached.merged(other.uncached),
            cache_hits=self.cache_hits + other.cache_hits,
            replayed=self.replayed + other.replayed,
            failed_requests=self.failed_requests + other.failed_requests,
            latency_s=self.latency_s + other.latency_s,
        )


class LedgerSummary(BaseModel):
    """The ledger's record for ``summary.json``.

    Attributes:
        roles: one account per role seen.
        total: the sum over roles.
    """

    roles: dict[str, RoleTotals] = Field(default_factory=dict)
    total: RoleTotals = Field(default_factory=RoleTotals)


class TokenLedger:
    """Adds up model responses by role; thread-safe.

    Example:
        >>> ledger = TokenLedger()
        >>> ledger.add("planner", ModelResponse(text="x"))
        >>> ledger.summary().roles["planner"].logical.requests
        1
    """

    def __init__(self) -> None:
        self._roles: dict[str, RoleTotals] = {}
        self._lock = threading.Lock()

    def _role(self, role: str) -> RoleTotals:
        if not role:
            raise ValueError("a ledger role must be a non-empty string")
        return self._roles.setdefault(role, RoleTotals())

    def add(self, role: str, response: ModelResponse) -> None:
        """Count one successful response under ``role`` (``planner``, ``reviewer``, ...): in
        the logical totals always, in the uncached ones unless it was cached or replayed.

        Raises:
            ValueError: when ``role`` is empty.
        """
        with self._lock:
            account = self._role(role)
            account.logical.add(response)
            if response.replayed:
                account.replayed += 1
            elif response.cached:
                account.cache_hits += 1
            else:
                account.uncached.add(response)
                account.latency_s += response.latency_s

    def add_failure(self, role: str) -> None:
        """Count one request under ``role`` that ended in a provider error.

        Raises:
            ValueError: when ``role`` is empty.
        """
        with self._lock:
            self._role(role).failed_requests += 1

    def summary(self) -> LedgerSummary:
        """Return a snapshot of the accounts (later additions do not change it)."""
        with self._lock:
            roles = {name: account.model_copy(deep=True) for name, account in self._roles.items()}
        total = RoleTotals()
        for account in roles.values():
            total = total.merged(account)
        return LedgerSummary(roles=dict(sorted(roles.items())), total=total)
