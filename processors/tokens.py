"""Token counting for the budget check, with a pluggable tokenizer.

``HuggingFaceTokenCounter`` reads a ``tokenizer.json`` (the labeller's own tokenizer; the
model profile says which, see ``gpu_worker.profiles.token_counter``). Without one,
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


@dataclass(frozen=True)
class TokenBudget:
    """Does a simplified page fit the labeller's context with its prompt and answer?"""

    context_tokens: int = 32768
    prompt_overhead_tokens: int = 400
    output_tokens_per_block: int = 6

    def needed(self, page_tokens: int, blocks: int) -> int:
        return page_tokens + self.prompt_overhead_tokens + blocks * self.output_tokens_per_block

    def fits(self, page_tokens: int, blocks: int) -> bool:
        return self.needed(page_tokens, blocks) <= self.context_tokens
