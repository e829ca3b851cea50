"""Page -> prompt token ids, with the profile's template and chat template."""

from __future__ import annotations

from typing import Any

from dripstream.gpu_worker.profiles import ModelProfile
from dripstream.processors.extract.simplify import flat_items
from dripstream.topics.records import SimplifiedPage


def render_prompt(profile: ModelProfile, page: SimplifiedPage) -> str:
    """The profile's template filled with the page (its simplified HTML, in the profile's
    layout, and its block count)."""
    html = (
        page.simplified_html
        if profile.html_layout == "nested"
        else flat_items(page.simplified_html)
    )
    return profile.template_text.replace("{{block_count}}", str(page.block_count)).replace(
        "{{html}}", html
    )


class PromptEncoder:
    """Builds prompt token ids with the model's own tokenizer (a Hugging Face tokenizer)."""

    def __init__(self, profile: ModelProfile, tokenizer: Any) -> None:
        self.profile = profile
        self.tokenizer = tokenizer

    def text(self, page: SimplifiedPage) -> str:
        """The full prompt text the model reads (chat template applied if the profile says so)."""
        prompt = render_prompt(self.profile, page)
        if not self.profile.use_chat_template:
            return prompt
        messages = [{"role": "user", "content": prompt}]
        if self.profile.system_prompt:
            messages.insert(0, {"role": "system", "content": self.profile.system_prompt})
        return self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=True,
            **self.profile.chat_template_kwargs,
        )

    def encode(self, page: SimplifiedPage) -> list[int]:
        """Token ids of the prompt (special tokens come from the chat template only)."""
        return self.tokenizer.encode(self.text(page), add_special_tokens=False)

    def count(self, text: str) -> int:
        """Tokens of a plain text (used for the canonical answer length)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))
