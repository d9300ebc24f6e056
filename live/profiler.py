"""Measure a model's step times on this machine with PyTorch and transformers.

``kvbudget profile`` builds a model from a Hugging Face style ``config.json`` with random
weights (nothing is downloaded: the weights' values do not change the time of a forward pass)
and times the two kinds of engine step the simulator's cost model predicts:

* **prefill**: one forward pass over ``n`` prompt tokens of one sequence, writing its KV cache
  (``num_prefill_tokens = n``, ``num_context_tokens = n``, ``prefill_attention = n * n``,
  ``num_prefill_seqs = 1``);
* **decode**: one single-token step for ``B`` sequences that each already hold ``C`` tokens of
  KV cache, built beforehand by a prefill (``num_decode_seqs = B``,
  ``num_context_tokens = B * (C + 1)``).

The features are those of :data:`kvbudget.perf.cost_model.FEATURES`, counted the way the engine
model counts them (context *after* the step), so the table feeds
:func:`kvbudget.perf.fit.fit_linear_cost_model` directly.

Each grid point is run ``warmup`` times untimed, then ``repeats`` times timed, each timing
bracketed by ``torch.cuda.synchronize()`` on a GPU; the table keeps the median and the 10th and
90th percentiles. A decode step's appended token is cropped off the cache after each run, so
every timed step sees the same context.

PyTorch and transformers are the optional extra ``profile``; they are imported inside the
functions that need them, and :func:`read_profile` / :func:`write_profile` need neither.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import inspect
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbudget.perf.cost_model import FEATURES
from kvbudget.perf.models import ModelSpec

if TYPE_CHECKING:
    import pandas as pd

PROFILE_FORMAT_VERSION = 1

DTYPES = ("bf16", "fp16", "fp32")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
DEVICES = ("auto", "cpu", "cuda")

DEFAULT_PREFILL_TOKENS = (64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_BATCH_SIZES = (1, 4, 16, 64)
DEFAULT_CONTEXT_LENGTHS = (128, 512, 2048)

PROFILE_COLUMNS = (
    "point_class",   # "prefill" or "decode"
    "batch_size",    # sequences in the step (1 for prefill)
    "seq_len",       # prefill: prompt tokens; decode: tokens already in each sequence's cache
    *FEATURES,
    "step_time_s",   # median of the timed repeats
    "step_time_p10_s",
    "step_time_p90_s",
    "step_time_min_s",
    "repeats",
    "warmup",
)
"""Columns of a profile table, one row per grid point."""

FILL_CHUNK_TOKENS = 16_384
"""Tokens per forward pass when a decode point's KV cache is filled (not timed)."""

INSTALL_HINT = ("kvbudget profile needs PyTorch and transformers: "
                "pip install 'kvbudget[profile]' (or: pip install torch transformers safetensors)")


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """Which steps to time: prefill token counts, decode batch sizes x context lengths."""

    prefill_tokens: tuple[int, ...] = DEFAULT_PREFILL_TOKENS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    context_lengths: tuple[int, ...] = DEFAULT_CONTEXT_LENGTHS
    repeats: int = 5
    warmup: int = 2

    def __post_init__(self) -> None:
        for name in ("prefill_tokens", "batch_sizes", "context_lengths"):
            values = getattr(self, name)
            if not isinstance(values, tuple):
                raise ValueError(f"profile grid {name} must be a tuple, got {values!r}")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"profile grid {name}: every value must be an integer >= 1,"
                                     f" got {v!r}")
            if len(set(values)) != len(values):
                raise ValueError(f"profile grid {name} has duplicate values: {values!r}")
        if not self.prefill_tokens and not (self.batch_sizes and self.context_lengths):
            raise ValueError("profile grid is empty: give prefill tokens or decode batch sizes "
                             "and context lengths")
        if self.repeats < 1:
            raise ValueError(f"profile grid repeats must be >= 1, got {self.repeats!r}")
        if self.warmup < 0:
            raise ValueError(f"profile grid warmup must be >= 0, got {self.warmup!r}")

    def points(self) -> list[tuple[str, int, int]]:
        """``(point_class, batch_size, seq_len)`` for every grid point, prefill first."""
        pts = [("prefill", 1, n) for n in sorted(self.prefill_tokens)]
        pts += [("decode", b, c) for c in sorted(self.context_lengths)
                for b in sorted(self.batch_sizes)]
        return pts


def point_features(point_class: str, batch_size: int, seq_len: int) -> dict[str, int]:
    """The cost model's five features of one grid point (see the module docstring)."""
    if point_class == "prefill":
        n = batch_size * seq_len
        return {"num_prefill_tokens": n, "num_decode_seqs": 0,
                "num_context_tokens": n, "prefill_attention": batch_size * seq_len * seq_len,
                "num_prefill_seqs": batch_size}
    if point_class == "decode":
        return {"num_prefill_tokens": 0, "num_decode_seqs": batch_size,
                "num_context_tokens": batch_size * (seq_len + 1), "prefill_attention": 0,
                "num_prefill_seqs": 0}
    raise ValueError(f"unknown point class {point_class!r}; known: prefill, decode")


def summarize_timings(times_s: Sequence[float]) -> dict[str, float]:
    """Median, 10th and 90th percentiles (linear interpolation) and minimum of timings."""
    if not times_s:
        raise ValueError("no timings to summarize")
    ordered = sorted(float(t) for t in times_s)

    def pct(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {"step_time_s": float(statistics.median(ordered)), "step_time_p10_s": pct(0.1),
            "step_time_p90_s": pct(0.9), "step_time_min_s": ordered[0]}


@dataclass(frozen=True, eq=False)
class Profile:
    """A measured profile: ``table`` (columns :data:`PROFILE_COLUMNS`) and ``meta`` (hardware,
    versions, dtype, model shape, grid, date; the sidecar JSON)."""

    table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)


def sidecar_path(path: Path) -> Path:
    """``FILE.meta.json`` beside a profile table ``FILE``."""
    return path.with_name(path.name + ".meta.json")


def table_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ValueError(f"{path}: profile table must end in .csv or .parquet, got {suffix!r}")


def write_profile(profile: Profile, path: Path) -> tuple[Path, Path]:
    """Write the table (CSV or Parquet by extension) and its sidecar ``FILE.meta.json``."""
    records = profile.table.loc[:, list(PROFILE_COLUMNS)].to_dict(orient="records")
    return write_profile_rows([{str(k): v for k, v in r.items()} for r in records],
                              profile.meta, path)


def write_profile_rows(rows: Sequence[dict[str, Any]], meta: dict[str, Any],
                       path: Path) -> tuple[Path, Path]:
    """Write rows of :data:`PROFILE_COLUMNS` and the sidecar; CSV needs only the standard
    library (so a machine with nothing but PyTorch and transformers can profile), Parquet
    needs pandas and pyarrow. Floats are written with ``repr``: they read back bit for bit."""
    fmt = table_format(path)
    if not path.parent.is_dir():
        raise ValueError(f"{path}: directory {path.parent} does not exist")
    if fmt == "csv":
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(PROFILE_COLUMNS)
            for row in rows:
                writer.writerow([_csv_cell(row[c]) for c in PROFILE_COLUMNS])
    else:
        import pandas as pd

        pd.DataFrame(list(rows), columns=list(PROFILE_COLUMNS)).to_parquet(path, index=False)
    meta_path = sidecar_path(path)
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path, meta_path


def _csv_cell(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "item"):  # numpy scalars from a DataFrame
        return _csv_cell(value.item())
    return str(value)


def read_profile(path: Path) -> Profile:
    """Read a profile table and its sidecar (absent sidecar: empty ``meta``).

    Errors name the file and the missing column or bad value.
    """
    import pandas as pd

    fmt = table_format(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such profile table")
    try:
        table = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
    except Exception as exc:  # pandas/pyarrow raise many types for a malformed file
        raise ValueError(f"{path}: not a readable {fmt} profile table ({exc})") from None
    missing = [c for c in (*FEATURES, "step_time_s") if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: missing column {missing[0]!r}")
    if table.empty:
        raise ValueError(f"{path}: profile table has no rows")
    meta: dict[str, Any] = {}
    meta_path = sidecar_path(path)
    if meta_path.is_file():
        try:
            loaded = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"{meta_path}: not valid JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{meta_path}: must hold a JSON object")
        meta = loaded
    return Profile(table=table, meta=meta)


# ---------------------------------------------------------------------------------------------
# Measurement (torch and transformers imported lazily)
# ---------------------------------------------------------------------------------------------


def _require_torch() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ValueError(f"{INSTALL_HINT} ({exc})") from None
    return torch, transformers


def _resolve_device(torch: Any, device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for but torch.cuda.is_available() is False")
    return device


def _torch_dtype(torch: Any, dtype: str) -> Any:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]


def _version_tuple(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def load_model_config(config: Path) -> Any:
    """A transformers config from a ``config.json`` file or a directory holding one."""
    _, transformers = _require_torch()
    if not config.exists():
        raise FileNotFoundError(f"{config}: no such model config file or directory")
    if config.is_dir() and not (config / "config.json").is_file():
        raise ValueError(f"{config}: directory has no config.json")
    try:
        return transformers.AutoConfig.from_pretrained(str(config), local_files_only=True)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"{config}: not a usable model config ({exc})") from None


def model_shape(config: Any, num_params: int) -> dict[str, Any]:
    """The shape figures the roofline presets use, read from a transformers config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    num_heads = int(text.num_attention_heads)
    hidden = int(text.hidden_size)
    head_dim = getattr(text, "head_dim", None) or hidden // num_heads
    return {
        "architecture": (list(getattr(config, "architectures", None) or []) or ["?"])[0],
        "model_type": str(getattr(config, "model_type", "?")),
        "num_layers": int(text.num_hidden_layers),
        "hidden_size": hidden,
        "num_heads": num_heads,
        "num_kv_heads": int(getattr(text, "num_key_value_heads", None) or num_heads),
        "head_dim": int(head_dim),
        "intermediate_size": int(getattr(text, "intermediate_size", 0) or 0),
        "vocab_size": int(text.vocab_size),
        "num_params": int(num_params),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _hardware(torch: Any, device: str) -> dict[str, Any]:
    hw: dict[str, Any] = {
        "device": device,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_num_threads": int(torch.get_num_threads()),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        hw.update({"gpu_name": str(props.name), "gpu_memory_bytes": int(props.total_memory),
                   "gpu_count": int(torch.cuda.device_count()),
                   "cuda_version": str(torch.version.cuda)})
    return hw


class _Runner:
    """A model on a device and the version-dependent keyword names of its forward pass."""

    def __init__(self, torch: Any, transformers: Any, config: Any, *, dtype: str, device: str,
                 attn_implementation: str, seed: int) -> None:
        self.torch = torch
        self.transformers = transformers
        self.config = config
        self.device = device
        torch.manual_seed(seed)
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        # transformers >= 4.56 names the argument `dtype` and warns about `torch_dtype`.
        new_api = _version_tuple(transformers.__version__) >= (4, 56)
        dtype_kw = "dtype" if new_api else "torch_dtype"
        kwargs = {dtype_kw: _torch_dtype(torch, dtype), "attn_implementation": attn_implementation}
        try:
            with torch.device(device):
                model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
        except ValueError as exc:
            raise ValueError(f"cannot build the model from its config: {exc}") from None
        self.model = model.eval()
        self.num_params = sum(int(p.numel()) for p in self.model.parameters())
        params = inspect.signature(self.model.forward).parameters
        # transformers 5 renamed `past_key_values` to `cache`; older versions only know the former.
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        if "logits_to_keep" in params:
            self.logits_kw: str | None = "logits_to_keep"
        elif "num_logits_to_keep" in params:
            self.logits_kw = "num_logits_to_keep"
        else:
            self.logits_kw = None
        self.vocab_size = int(self.config.get_text_config().vocab_size
                              if hasattr(self.config, "get_text_config")
                              else self.config.vocab_size)

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def new_cache(self) -> Any:
        cache_cls = self.transformers.DynamicCache
        try:
            return cache_cls(config=self.config)
        except TypeError:
            return cache_cls()

    def ids(self, batch: int, length: int) -> Any:
        ids = self.torch.randint(0, self.vocab_size, (batch, length), generator=self.gen)
        return ids.to(self.device)

    def forward(self, input_ids: Any, cache: Any) -> None:
        kwargs: dict[str, Any] = {"input_ids": input_ids, self.cache_kw: cache, "use_cache": True}
        if self.logits_kw is not None:
            kwargs[self.logits_kw] = 1  # an engine computes logits for the last token only
        self.model(**kwargs)

    def time_prefill(self, seq_len: int, runs: int) -> list[float]:
        ids = self.ids(1, seq_len)
        times = []
        for _ in range(runs):
            cache = self.new_cache()
            self.sync()
            start = time.perf_counter()
            self.forward(ids, cache)
            self.sync()
            times.append(time.perf_counter() - start)
            del cache
        return times

    def time_decode(self, batch: int, context: int, runs: int) -> list[float]:
        cache = self.new_cache()
        # Fill each sequence's KV to `context` by chunked prefill, at most FILL_CHUNK_TOKENS
        # tokens a pass, so a large batch's activations do not exhaust memory the cache needs.
        prompt = self.ids(batch, context)
        chunk = max(1, FILL_CHUNK_TOKENS // batch)
        for begin in range(0, context, chunk):
            self.forward(prompt[:, begin:begin + chunk], cache)
        del prompt
        step = self.ids(batch, 1)
        times = []
        for _ in range(runs):
            self.sync()
            start = time.perf_counter()
            self.forward(step, cache)
            self.sync()
            times.append(time.perf_counter() - start)
            cache.crop(-1)  # drop the appended token: every run sees `context` cached tokens
        del cache
        return times

    def is_oom(self, exc: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", None)
        return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()

    def free(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


class ProfileRun:
    """A built model and its grid, ready to measure: ``meta`` (the sidecar) and :meth:`rows`.

    Made by :func:`start_profile`. ``meta["skipped"]`` lists grid points that ran out of device
    memory; ``meta["complete"]`` turns True once :meth:`rows` has run to the end.
    """

    def __init__(self, runner: _Runner, grid: ProfileGrid, meta: dict[str, Any]) -> None:
        self._runner = runner
        self.grid = grid
        self.meta = meta

    @property
    def num_points(self) -> int:
        return len(self.grid.points())

    def rows(self) -> Iterator[dict[str, Any]]:
        """Measure the grid, yielding one row (a dict of :data:`PROFILE_COLUMNS`) per point."""
        runner, grid = self._runner, self.grid
        with runner.torch.inference_mode():
            for point_class, batch, seq_len in grid.points():
                runs = grid.warmup + grid.repeats
                try:
                    if point_class == "prefill":
                        times = runner.time_prefill(seq_len, runs)
                    else:
                        times = runner.time_decode(batch, seq_len, runs)
                except (RuntimeError, MemoryError) as exc:
                    if not (isinstance(exc, MemoryError) or runner.is_oom(exc)):
                        raise
                    runner.free()
                    self.meta["skipped"].append({"point_class": point_class, "batch_size": batch,
                                                 "seq_len": seq_len, "reason": "out of memory"})
                    continue
                row: dict[str, Any] = {"point_class": point_class, "batch_size": batch,
                                       "seq_len": seq_len,
                                       **point_features(point_class, batch, seq_len)}
                row.update(summarize_timings(times[grid.warmup:]))
                row.update({"repeats": grid.repeats, "warmup": grid.warmup})
                yield row
        runner.free()
        self.meta["complete"] = True


def start_profile(
    config_path: Path,
    grid: ProfileGrid,
    *,
    dtype: str = "bf16",
    device: str = "auto",
    attn_implementation: str = "sdpa",
    num_threads: int | None = None,
    seed: int = 0,
) -> ProfileRun:
    """Build the model from ``config_path`` with random weights on the device (``auto``: CUDA
    when available, else the CPU) in ``dtype``; nothing is measured yet."""
    torch, transformers = _require_torch()
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    resolved = _resolve_device(torch, device)
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
        torch.set_num_threads(num_threads)
    config = load_model_config(config_path)
    runner = _Runner(torch, transformers, config, dtype=dtype, device=resolved,
                     attn_implementation=attn_implementation, seed=seed)
    meta: dict[str, Any] = {
        "kvbudget_profile_format": PROFILE_FORMAT_VERSION,
        "created_utc": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "model_config": str(config_path),
        "model": model_shape(config, runner.num_params),
        "dtype": dtype,
        "dtype_bytes": DTYPE_BYTES[dtype],
        "attn_implementation": attn_implementation,
        "kv_cache": "transformers DynamicCache (concatenates K/V each step)",
        "hardware": _hardware(torch, resolved),
        "software": {"python": platform.python_version(), "torch": str(torch.__version__),
                     "transformers": str(transformers.__version__)},
        "grid": asdict(grid),
        "seed": seed,
        "features": list(FEATURES),
        "skipped": [],
        "complete": False,
    }
    return ProfileRun(runner, grid, meta)


def profile_model(
    config_path: Path,
    grid: ProfileGrid,
    *,
    dtype: str = "bf16",
    device: str = "auto",
    attn_implementation: str = "sdpa",
    num_threads: int | None = None,
    seed: int = 0,
) -> Profile:
    """Build the model and measure the whole grid (see :func:`start_profile`)."""
    import pandas as pd

    run = start_profile(config_path, grid, dtype=dtype, device=device,
                        attn_implementation=attn_implementation, num_threads=num_threads,
                        seed=seed)
    rows = list(run.rows())
    return Profile(table=pd.DataFrame(rows, columns=list(PROFILE_COLUMNS)), meta=run.meta)


def rows_to_profile(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> Profile:
    """A :class:`Profile` from the rows measured so far (all of them, or a partial run's)."""
    import pandas as pd

    return Profile(table=pd.DataFrame(list(rows), columns=list(PROFILE_COLUMNS)), meta=meta)


def measure_to_file(
    run: ProfileRun,
    path: Path,
    *,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    time_limit_s: float | None = None,
) -> list[dict[str, Any]]:
    """Measure ``run``'s grid, rewriting ``path`` and its sidecar after every point, so a run
    that fails, is interrupted or is killed keeps every point measured (``meta["complete"]``
    stays False). ``time_limit_s`` stops after the point that passes it (``meta["stopped"]``
    says so). Returns the rows."""
    rows: list[dict[str, Any]] = []
    write_profile_rows(rows, run.meta, path)  # replaces any older file at once
    start = time.monotonic()
    for row in run.rows():
        rows.append(row)
        write_profile_rows(rows, run.meta, path)
        if on_row is not None:
            on_row(row)
        if time_limit_s is not None and time.monotonic() - start > time_limit_s:
            run.meta["stopped"] = (f"time limit of {time_limit_s:g} s reached after "
                                   f"{len(rows)} of {run.num_points} points")
            break
    write_profile_rows(rows, run.meta, path)
    return rows


def model_spec_from_meta(meta: dict[str, Any], name: str | None = None) -> Any:
    """A :class:`kvbudget.perf.models.ModelSpec` of the profiled model (for a roofline of it)."""
    shape = meta.get("model")
    if not isinstance(shape, dict):
        raise ValueError("profile sidecar has no 'model' shape; give a model preset instead")
    try:
        dtype_bytes = int(meta.get("dtype_bytes", 2))
        weight_dtype = {4: "float32", 2: "float16" if meta.get("dtype") == "fp16" else "bfloat16"}
        return ModelSpec(
            name=name or f"profiled-{shape['architecture']}",
            model_type=str(shape.get("model_type", "?")),
            num_layers=int(shape["num_layers"]),
            hidden_size=int(shape["hidden_size"]),
            num_attention_heads=int(shape["num_heads"]),
            num_kv_heads=int(shape["num_kv_heads"]),
            head_dim=int(shape["head_dim"]),
            intermediate_size=int(shape["intermediate_size"]),
            vocab_size=int(shape["vocab_size"]),
            weight_dtype=weight_dtype.get(dtype_bytes, "bfloat16"),
            source="profile sidecar",
            num_params_published=float(shape["num_params"]),
        )
    except KeyError as exc:
        raise ValueError(f"profile sidecar: missing field 'model.{exc.args[0]}'") from None


def _int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvbudget.live.profiler``: the measurement alone, for a machine that has PyTorch and
    transformers but not kvbudget's other dependencies (typer, pandas, scipy); writes CSV. The
    fit runs elsewhere with ``kvbudget profile-fit``. ``kvbudget profile`` is the usual way."""
    defaults = ProfileGrid()
    parser = argparse.ArgumentParser(prog="python -m kvbudget.live.profiler", description=main.__doc__)
    parser.add_argument("--model", type=Path, required=True, help="config.json or its directory")
    parser.add_argument("--out", type=Path, required=True, help="profile table FILE.csv")
    parser.add_argument("--dtype", default="bf16", choices=DTYPES)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--prefill-tokens", type=_int_tuple, default=defaults.prefill_tokens)
    parser.add_argument("--batch-sizes", type=_int_tuple, default=defaults.batch_sizes)
    parser.add_argument("--context-lengths", type=_int_tuple, default=defaults.context_lengths)
    parser.add_argument("--repeats", type=int, default=defaults.repeats)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--attn-implementation", default="sdpa")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="stop after the grid point that passes this many seconds")
    args = parser.parse_args(argv)
    try:
        grid = ProfileGrid(args.prefill_tokens, args.batch_sizes, args.context_lengths,
                           args.repeats, args.warmup)
        table_format(args.out)
        run = start_profile(args.model, grid, dtype=args.dtype, device=args.device,
                            attn_implementation=args.attn_implementation,
                            num_threads=args.threads, seed=args.seed)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hw = run.meta["hardware"]
    print(f"profiling {run.meta['model']['architecture']} ({run.meta['model']['num_params']:,} "
          f"parameters, {args.dtype}) on {hw.get('gpu_name') or hw['cpu_model']}: "
          f"{run.num_points} grid points", flush=True)
    start = time.monotonic()

    def report(row: dict[str, Any]) -> None:
        print(f"{time.monotonic() - start:8.1f}s {row['point_class']:<7} "
              f"batch={row['batch_size']:<4} seq_len={row['seq_len']:<6} "
              f"median={row['step_time_s'] * 1e3:.3f} ms "
              f"p10-p90={row['step_time_p10_s'] * 1e3:.3f}-{row['step_time_p90_s'] * 1e3:.3f} ms",
              flush=True)

    rows = measure_to_file(run, args.out, on_row=report, time_limit_s=args.time_limit_s)
    for skipped in run.meta["skipped"]:
        print(f"skipped {skipped}", flush=True)
    if "stopped" in run.meta:
        print(run.meta["stopped"], flush=True)
    print(f"wrote {args.out} ({len(rows)} points) and {sidecar_path(args.out)}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
