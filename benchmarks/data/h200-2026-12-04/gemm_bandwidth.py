"""The script that measured gemm_bandwidth.json on the lent H200 (2026-12-04), as it ran there:
bf16 GEMMs of Llama-3.1-8B's shapes (QKV 4096x6144, gate+up 4096x28672, down 14336x4096,
lm_head 4096x128256) at 1 to 8,192 tokens, and HBM streaming (a sum reads, a copy reads and
writes) over 0.25-16 GiB; each the mean of 20 runs after 3 warm-ups, timed by CUDA events.
Run: python3 gemm_bandwidth.py > gemm_bandwidth.json (PyTorch with CUDA only)."""
import json

import torch

d = torch.device('cuda')
r = {}


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


g = {}
for K, N in ((4096, 6144), (4096, 28672), (14336, 4096), (4096, 128256)):
    W = torch.randn(K, N, device=d, dtype=torch.bfloat16)
    for M in (1, 8, 32, 128, 512, 2048, 8192):
        X = torch.randn(M, K, device=d, dtype=torch.bfloat16)
        t = tm(lambda: X @ W)  # noqa: B023 (called at once)
        g[f"{M}x{K}x{N}"] = {"s": t, "tflops": 2 * M * K * N / t / 1e12,
                             "tbps": 2 * (K * N + M * K + M * N) / t / 1e12}
r['gemm'] = g
b = {}
for gb in (0.25, 1, 4, 16):
    n = int(gb * 2**30 / 2)
    x = torch.empty(n, device=d, dtype=torch.bfloat16).normal_()
    y = torch.empty_like(x)
    t = tm(lambda: x.sum())  # noqa: B023
    b[f"read_{gb}GiB"] = n * 2 / t / 1e12
    t = tm(lambda: y.copy_(x))  # noqa: B023
    b[f"copy_{gb}GiB"] = 2 * n * 2 / t / 1e12
r['bw_TBps'] = b
r['env'] = {'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(0)}
print(json.dumps(r, indent=1))
