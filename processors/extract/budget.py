"""What the simplify step sizes a page by (``PipelineSettings``): the simplifier's
configuration, the budget the labeller's pages must fit, and the token counter that
budget is counted with. The labeller registry says which budget a labeller needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from dripstream.processors.extract.simplify import SimplifyConfig
from dripstream.processors.extract.tokens import EstimatedTokenCounter, TokenBudget, TokenCounter


@dataclass(frozen=True)
class PipelineSettings:
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    budget: TokenBudget = field(default_factory=TokenBudget)
    token_counter: TokenCounter = field(default_factory=EstimatedTokenCounter)
