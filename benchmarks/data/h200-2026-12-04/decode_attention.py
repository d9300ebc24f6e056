"""The script that measured decode_attention.json on the lent H200 (2026-12-04), as it ran
there: one decode step's attention (one query token per sequence) over a KV cache of C tokens,
PyTorch's scaled_dot_product_attention, bf16, head dim 128, 32 query heads and 32 (MHA,
Llama-2-7B) or 8 (GQA, Llama-3.1-8B) KV heads, 1 to 256 sequences, 128 to 32,768 tokens of
context; the KV bytes read per second against the HBM's. Each the mean of 20 runs after 3
warm-ups, timed by CUDA events; the backend that ran is recorded (flash first, then the
memory-efficient kernel). Contiguous KV, not vLLM's paged blocks: an upper bound of what a
paged kernel reads. Run: python3 decode_attention.py > decode_attention.json"""
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

d = torch.device("cuda")


def tm(f, n=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Event(True)
    e = torch.cuda.Event(True)
    s.record()
    for _ in range(n):
        f()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3


out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "points": []}
for kv_heads in (32, 8):
    for batch in (1, 8, 32, 128, 256):
        for ctx in (128, 512, 2048, 8192, 32768):
            kv_bytes = 2 * batch * kv_heads * ctx * 128 * 2
            if kv_bytes > 40 * 2**30:
                continue
            q = torch.randn(batch, 32, 1, 128, device=d, dtype=torch.bfloat16)
            k = torch.randn(batch, kv_heads, ctx, 128, device=d, dtype=torch.bfloat16)
            v = torch.randn_like(k)
            row = {"kv_heads": kv_heads, "q_heads": 32, "head_dim": 128, "batch": batch,
                   "context": ctx, "kv_bytes": kv_bytes}
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
                try:
                    with sdpa_kernel([backend]):
                        t = tm(lambda: F.scaled_dot_product_attention(
                            q, k, v, enable_gqa=kv_heads != 32))  # noqa: B023
                except RuntimeError as exc:
                    row[name] = {"error": str(exc).splitlines()[0][:200]}
                    continue
                row[name] = {"s": t, "tbps": kv_bytes / t / 1e12}
            out["points"].append(row)
            torch.cuda.empty_cache()
print(json.dumps(out, indent=1))
