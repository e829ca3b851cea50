"""The CPU path (the default stream, the default offline extract) runs without the GPU
worker: each labeller's registry entry declares its budget, and a CPU labeller's needs
no model profile."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def test_the_cpu_path_never_imports_the_gpu_worker() -> None:
    """The default stream's stages and the default offline extract budget their pages
    without a model profile: of ``dripstream.gpu_worker`` only the engine's option type
    (a dataclass the settings spine declares the ``DRIPSTREAM_VLLM_*`` defaults from,
    importing no vLLM) is loaded; no profile, prompt, constraint or labeller module."""
    code = (
        "import sys\n"
        "from dripstream.streams.app import build_handlers, worker_provisions\n"
        "from dripstream.streams.settings import StreamSettings\n"
        "from dripstream.streams.stages import DEFAULT_STAGES, chosen\n"
        "from dripstream.streams.cli import main\n"
        "settings = StreamSettings.from_env({})\n"
        "handlers = build_handlers(\n"
        "    settings, worker_provisions(settings), chosen(DEFAULT_STAGES)\n"
        ")\n"
        "assert main(['extract', sys.argv[1], '--no-sandbox', '--quiet']) == 0\n"
        "gpu = sorted(m for m in sys.modules if m.startswith('dripstream.gpu_worker'))\n"
        "print()\n"
        "print('vllm' in sys.modules)\n"
        "print('gpu_worker modules:', gpu)\n"
    )
    page = "<html><body><article><p>" + "Words of a paragraph. " * 20 + "</p></article>"
    with tempfile.TemporaryDirectory() as folder:
        html = Path(folder) / "page.html"
        html.write_text(page)
        out = subprocess.run(
            [sys.executable, "-c", code, str(html)], capture_output=True, text=True, check=True
        )
    *_, vllm, gpu = out.stdout.splitlines()
    assert vllm == "False"
    allowed = "gpu_worker modules: ['dripstream.gpu_worker', 'dripstream.gpu_worker.engine']"
    assert gpu == allowed, gpu
