"""``VllmLabeller``: block labels from a small LM under a per-page regex constraint.

The engine lives on its own event-loop thread, so the labeller serves both the offline
batch API (``label``) and the stream's concurrent one (``label_page``, awaited from any
event loop). A semaphore bounds the pages inside the engine; a finished page frees its
slot at once, so the engine is fed continuously and no page waits for a batch.

Every page ends in a ``LabelOutcome``: labels, or a failure reason for the fallback route
(``over_context``, ``engine_error``, ``answer_*`` from the parser). An engine that died is
restarted for the next page.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from dripstream.gpu_worker.constraint import (
    AnswerError,
    answer_regex,
    format_answer,
    max_answer_tokens,
    parse_answer,
)
from dripstream.gpu_worker.engine import EngineSettings, start_engine
from dripstream.gpu_worker.profiles import DEFAULT_PROFILE, ModelProfile, load_profile
from dripstream.gpu_worker.prompt import PromptEncoder
from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.label.handoff import CascadeLabeller
from dripstream.processors.label.learned import LearnedLabeller, LearnedOptions
from dripstream.processors.label.registry import LabellerOptions
from dripstream.topics.records import SimplifiedPage

log = logging.getLogger(__name__)
T = TypeVar("T")


class VllmLabeller:
    """The ``AsyncLabeller`` on vLLM (see the module docstring)."""

    def __init__(
        self,
        profile: ModelProfile,
        engine: EngineSettings | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        self.profile = profile
        self.name = f"vllm:{profile.name}"
        self.settings = engine or EngineSettings()
        self.context_tokens = profile.context_tokens
        self._tokenizer_path = profile.tokenizer
        self.prompts = PromptEncoder(
            profile, AutoTokenizer.from_pretrained(self._tokenizer_path or profile.weights)
        )
        self._request_ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine")
        self._thread.daemon = True
        self._thread.start()
        self._engine: Any = None
        self._restart = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.settings.max_in_flight)
        self._run(self._ensure_engine())

    @classmethod
    def from_options(cls, options: LabellerOptions) -> VllmLabeller:
        """The profile and weights the pipeline chose; engine knobs from
        ``options.engine`` (the ``DRIPSTREAM_VLLM_*`` settings), else the defaults."""
        profile = load_profile(options.profile or DEFAULT_PROFILE, weights=options.model)
        return cls(profile, engine=options.engine or EngineSettings())

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _ensure_engine(self) -> Any:
        """The running engine; starts one if there is none or the last one died."""
        async with self._restart:
            if self._engine is not None and self._engine.errored:
                log.error("vLLM engine died (%s); restarting", self._engine.dead_error)
                self._engine.shutdown()
                self._engine = None
            if self._engine is None:
                self._engine = start_engine(
                    self.profile.weights,
                    self._tokenizer_path,
                    self.context_tokens,
                    self.settings,
                )
            return self._engine

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        """All pages at once through the in-flight window; one outcome per page, in order."""

        async def gather() -> list[LabelOutcome]:
            return list(await asyncio.gather(*(self._label(page) for page in pages)))

        return self._run(gather())

    async def label_page(self, page: SimplifiedPage) -> LabelOutcome:
        """One page, awaitable from any event loop; never raises for a page's failure."""
        future = asyncio.run_coroutine_threadsafe(self._label(page), self._loop)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Shut the engine down and stop the engine thread (idempotent)."""
        if self._loop.is_closed():
            return
        self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    async def _label(self, page: SimplifiedPage) -> LabelOutcome:
        started = time.perf_counter()
        profile = self.profile

        def outcome(labels: list[str] | None, failure: str | None = None, **tokens: int):
            latency = round((time.perf_counter() - started) * 1000, 3)
            return LabelOutcome(labels, failure, latency_ms=latency, **tokens)

        prompt_ids, answer_tokens = await asyncio.to_thread(self._encode, page)
        room = self.context_tokens - len(prompt_ids)
        if answer_tokens > room:
            return outcome(None, "over_context", tokens_in=len(prompt_ids))
        try:
            completion = await self._generate(page, prompt_ids, room)
        except Exception:
            log.exception("vLLM failed on page %s", page.page_id)
            return outcome(None, "engine_error", tokens_in=len(prompt_ids))
        tokens = {"tokens_in": len(prompt_ids), "tokens_out": len(completion.token_ids)}
        try:
            labels = parse_answer(
                profile.output_format, completion.text, page.block_count, profile.labels
            )
        except AnswerError as error:
            return outcome(None, error.reason, **tokens)
        return outcome(labels, **tokens)

    def _encode(self, page: SimplifiedPage) -> tuple[list[int], int]:
        """Prompt ids and the canonical answer's token count (what must fit beside it)."""
        longest = max(self.profile.labels, key=len)
        canonical = format_answer(self.profile.output_format, [longest] * page.block_count)
        return self.prompts.encode(page), self.prompts.count(canonical)

    async def _generate(self, page: SimplifiedPage, prompt_ids: list[int], room: int) -> Any:
        """The final completion of one constrained, greedy request."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        profile = self.profile
        regex = answer_regex(profile.output_format, page.block_count, profile.labels)
        cap = max_answer_tokens(profile.output_format, page.block_count, profile.labels)
        params = SamplingParams(
            temperature=0,
            max_tokens=min(cap, room),
            structured_outputs=StructuredOutputsParams(regex=regex),
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        request_id = f"{page.page_id}-{next(self._request_ids)}"
        async with self._slots:
            engine = await self._ensure_engine()
            final = None
            async for output in engine.generate(
                TokensPrompt(prompt_token_ids=prompt_ids), params, request_id=request_id
            ):
                final = output
        if final is None or not final.outputs:
            raise RuntimeError(f"no output for request {request_id}")
        return final.outputs[0]


# The learned labeller's floor in the learned+vllm chain when none is set: alone it has
# none (every page keeps its labels), in the chain unsure pages go to vLLM.
CHAIN_MIN_CONFIDENCE = 0.5


def learned_then_vllm(options: LabellerOptions) -> CascadeLabeller:
    """The ``learned+vllm`` labeller: the learned CPU labeller, and vLLM for the pages
    below its confidence floor (``options.learned.min_confidence``, else
    ``CHAIN_MIN_CONFIDENCE``)."""
    learned = options.learned or LearnedOptions()
    if learned.min_confidence is None:
        learned = replace(learned, min_confidence=CHAIN_MIN_CONFIDENCE)
    return CascadeLabeller(
        LearnedLabeller(options=replace(options, learned=learned)),
        VllmLabeller.from_options(options),
    )
