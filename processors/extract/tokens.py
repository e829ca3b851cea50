"""Token counting for the budget check, with a pluggable tokenizer.

``HuggingFaceTokenCounter`` reads a ``tokenizer.json`` (the labeller's own tokenizer; the
model profile says which, see ``dripstream.gpu_worker.profiles.token_counter``). Without one,
``EstimatedTokenCounter`` gives a clearly named estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class EstimatedTokenCounter:
    """UTF-8 bytes / 4: close to BPE counts for markup and Latin text, ~0.75 per CJK char."""

    name = "estimate:utf8-bytes/4"

    def count(self, text: str) -> int:
        return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


class HuggingFaceTokenCounter:
    """Exact counts from a ``tokenizer.json`` (the labeller's tokenizer)."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(path))
        self.name = f"tokenizer:{path}"

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


# A CPU labeller reads no prompt, so no context bounds its pages; this bounds the blocks
# (and so the feature matrix, ~1 KB a block) that one page brings to the label stage.
CPU_MAX_BLOCKS = 20_000


@dataclass(frozen=True)
class TokenBudget:
    """Does a simplified page fit the labeller's context with its prompt and answer (and,
    with ``max_blocks``, its block cap)?"""

    context_tokens: int = 32768
    prompt_overhead_tokens: int = 400
    output_tokens_per_block: int = 6
    max_blocks: int | None = None

    @classmethod
    def cpu(cls, max_blocks: int = CPU_MAX_BLOCKS) -> TokenBudget:
        """The budget of a labeller without a context (learned, heuristic): blocks only."""
        return cls(context_tokens=2**62, max_blocks=max_blocks)

    def needed(self, page_tokens: int, blocks: int) -> int:
        return page_tokens + self.prompt_overhead_tokens + blocks * self.output_tokens_per_block

    def refusal(self, page_tokens: int, blocks: int) -> str | None:
        """Why the page does not fit (the fallback reason), None when it does."""
        if self.max_blocks is not None and blocks > self.max_blocks:
            return "too_many_blocks"
        if self.needed(page_tokens, blocks) > self.context_tokens:
            return "over_token_budget"
        return None
