"""Token usage, what it costs, and the budgets that stop a runaway run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ModelPrice", "UsageMeter", "check_budget_config"]


@dataclass(frozen=True)
class ModelPrice:
    """What a model costs, per million tokens (any currency; costs come out in it)."""

    input_per_million: float
    """Price of a million prompt tokens."""
    output_per_million: float
    """Price of a million completion tokens."""

    def cost(self, usage: Mapping[str, int]) -> float:
        """The cost of one call's usage."""
        return (
            usage.get("prompt_tokens", 0) * self.input_per_million
            + usage.get("completion_tokens", 0) * self.output_per_million
        ) / 1_000_000


def check_budget_config(
    max_total_tokens: int | None,
    max_cost: float | None,
    prices: Mapping[str, ModelPrice] | None,
    model: str | None,
    names: tuple[str, str] = ("max_total_tokens", "max_cost"),
) -> None:
    """Raise ValueError naming a bad budget knob (or a cost cap without a price).

    ``model`` None skips the price check (the model is not known yet). ``names``: the
    knobs' names in messages (the session budgets share these checks).
    """
    tokens_knob, cost_knob = names
    if max_total_tokens is not None and (
        isinstance(max_total_tokens, bool) or not isinstance(max_total_tokens, int)
    ):
        raise ValueError(f"{tokens_knob} must be an int >= 1 or None, got {max_total_tokens!r}")
    if max_total_tokens is not None and max_total_tokens < 1:
        raise ValueError(f"{tokens_knob} must be >= 1 or None, got {max_total_tokens!r}")
    if max_cost is not None and not max_cost > 0:
        raise ValueError(f"{cost_knob} must be > 0 or None, got {max_cost!r}")
    if prices is not None and not isinstance(prices, Mapping):
        raise ValueError(f"prices must be a mapping of model name to ModelPrice, got {prices!r}")
    for name, price in (prices or {}).items():
        if not isinstance(price, ModelPrice):
            raise ValueError(f"prices[{name!r}] must be a ModelPrice, got {price!r}")
    if max_cost is not None and model is not None and model not in (prices or {}):
        raise ValueError(
            f"{cost_knob} needs the price of model {model!r}: pass "
            f"prices={{{model!r}: ModelPrice(input_per_million=..., output_per_million=...)}}"
        )


class UsageMeter:
    """Sums usage (and cost, for the models it has a price of) over one run; says when
    a budget is spent. A turn that moved to a fallback model is priced per model."""

    __slots__ = ("cost", "max_cost", "max_total_tokens", "prices", "totals")

    def __init__(
        self,
        prices: Mapping[str, ModelPrice],
        max_total_tokens: int | None,
        max_cost: float | None,
    ) -> None:
        self.prices = prices
        self.max_total_tokens = max_total_tokens
        self.max_cost = max_cost
        self.totals: dict[str, int] = {}
        self.cost: float | None = 0.0 if prices else None

    def add(self, usage: Mapping[str, int], model: str) -> float | None:
        """Count one call's usage on ``model``; return its cost (None without its price)."""
        totals = self.totals
        for key, value in usage.items():
            totals[key] = totals.get(key, 0) + value
        price = self.prices.get(model)
        if price is None:
            return None
        cost = price.cost(usage)
        self.cost = (self.cost or 0.0) + cost
        return cost

    def exceeded(self) -> str | None:
        """Which budget is spent ("max_total_tokens" / "max_cost"), or None."""
        if self.max_total_tokens is not None:
            if self.totals.get("total_tokens", 0) > self.max_total_tokens:
                return "max_total_tokens"
        if self.max_cost is not None and (self.cost or 0.0) > self.max_cost:
            return "max_cost"
        return None
