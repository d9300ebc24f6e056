"""Generate a tiny random Llama (about 1.4 M parameters) that vLLM can serve on a CPU.

Run with an interpreter that has ``numpy`` and ``tokenizers`` (the vLLM virtual environment
has both):

    python tests/live/tiny_model.py OUT_DIR

It writes ``config.json`` (LlamaForCausalLM: hidden 256, 2 layers, 4 heads with 2 KV heads,
head_dim 64), ``model.safetensors`` (float32 weights drawn with numpy, the safetensors layout
written by hand: an 8-byte little-endian header length, a JSON header, the raw tensors),
``tokenizer.json`` (a byte-level BPE trained with ``tokenizers`` on a generated corpus),
``tokenizer_config.json`` and ``generation_config.json``. The same seed gives the same bytes.
Nothing is downloaded.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

HIDDEN = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
INTERMEDIATE = 512
VOCAB = 512
MAX_POSITIONS = 2048
SPECIAL = ("<s>", "</s>", "<unk>")

TEXT = (
    "the gateway admits a request when its reservation fits the budget of its tier and the "
    "engine keeps the cache in blocks of tokens while the scheduler runs prefill and decode "
    "steps for every sequence in the batch until the output is complete or the lease expires"
)
WORDS = tuple(TEXT.split(" "))


def _corpus(rng: np.random.Generator, num_lines: int = 2000) -> list[str]:
    lines = []
    for _ in range(num_lines):
        n = int(rng.integers(4, 16))
        words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), n)]
        digits = "".join(str(int(d)) for d in rng.integers(0, 10, int(rng.integers(1, 6))))
        lines.append(" ".join(words) + f" {digits}.")
    return lines


def build_tokenizer(out_dir: Path, seed: int = 0) -> int:
    """Train a byte-level BPE of ``VOCAB`` entries; return its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(np.random.default_rng(seed)), trainer=trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
    }, indent=2) + "\n")
    return int(tok.get_vocab_size())


def _weights(rng: np.random.Generator, vocab: int) -> dict[str, np.ndarray]:
    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": normal(vocab, HIDDEN),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
        "lm_head.weight": normal(vocab, HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        w[p + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        w[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
    return w


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format: u64 header length, JSON header, then the tensors' bytes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f4")
        data = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)


def make_tiny_llama(out_dir: Path, seed: int = 0) -> int:
    """Write the model into ``out_dir``; return its parameter count."""
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out_dir, seed)
    if vocab > VOCAB:
        raise RuntimeError(f"tokenizer has {vocab} entries, more than {VOCAB}")
    tensors = _weights(np.random.default_rng(seed + 1), VOCAB)
    write_safetensors(out_dir / "model.safetensors", tensors)
    bos, eos = SPECIAL.index("<s>"), SPECIAL.index("</s>")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2) + "\n"
    )
    return sum(int(t.size) for t in tensors.values())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    n = make_tiny_llama(Path(sys.argv[1]))
    print(f"tiny llama: {n} parameters in {sys.argv[1]}")
