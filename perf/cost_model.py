"""Step-time cost models behind one small interface.

One engine step runs a batch of prefill chunks and decode tokens. Its duration depends on five
features, all counted by the engine model:

* ``num_prefill_tokens``: prompt (or recompute) tokens computed this step;
* ``num_decode_seqs``: sequences generating one token this step;
* ``num_context_tokens``: KV tokens attended to (sum over scheduled sequences of their context
  length after the step): the KV bytes a decode step reads;
* ``prefill_attention``: sum over prefill chunks of ``chunk * (context after the chunk)``: the
  quadratic part of prefill attention;
* ``num_prefill_seqs``: sequences with a prefill chunk this step: what an engine pays per
  prefilling request whatever its length (input and attention-metadata preparation, the
  prefill attention call, sampling its first token). On a CPU vLLM a step with a 16-token
  prefill costs about three times a decode-only step; on a GPU the term is small.

A model's :meth:`CostModel.step_time` must be written with element-wise arithmetic only (it is
called with floats and with numpy arrays of many steps at once, and both must give the same bits).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import MLASpec, ModelSpec, MoESpec, get_model
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.perf.step_features import FEATURES, StepFeatures, decode_step_times
from kvbudget.perf.step_time import VllmStepModel

F = TypeVar("F", float, npt.NDArray[np.float64])

__all__ = ["FEATURES", "CostModel", "LinearCostModel", "StepFeatures"]


class CostModel(Protocol):
    """Seconds per engine step as a function of the step's five features
    (:class:`~kvbudget.perf.step_features.StepFeatures`, in its order), and of a run of
    pure-decode steps as an array (the bits of one ``step_time`` call per step)."""

    def step_time(
        self,
        num_prefill_tokens: F,
        num_decode_seqs: F,
        num_context_tokens: F,
        prefill_attention: F,
        num_prefill_seqs: F,
    ) -> F: ...

    def decode_step_times(
        self, num_decode_seqs: int, first_context: int, num_steps: int
    ) -> npt.NDArray[np.float64]: ...

    def describe(self) -> dict[str, Any]: ...


MAX_COEFFICIENT_S = 1.0
"""The largest linear coefficient: a second per step, token or sequence, beyond any engine (a
larger one would simulate a run for ages)."""
MAX_FRONTEND_OVERHEAD_S = 60.0
"""The largest ``frontend_overhead_s`` a cost-model file may give."""

@dataclass(frozen=True, slots=True)
class LinearCostModel:
    """``t = intercept_s + sum(coef * feature)``: explicit coefficients, fitted by calibration.

    The fit (``kvbudget calibrate`` / ``kvbudget profile``) writes these to a JSON file that
    :func:`load_cost_model` reads back.
    """

    FIT_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "intercept_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s")
    """The float fields a calibrator may change (``dataclasses.replace``): the four that every
    recorded run constrains (the attention and per-prefill-sequence terms need profiles)."""

    intercept_s: float
    per_prefill_token_s: float
    per_decode_seq_s: float
    per_context_token_s: float
    per_prefill_attention_s: float = 0.0
    per_prefill_seq_s: float = 0.0
    source: str = "explicit"

    def __post_init__(self) -> None:
        for name in (
            "intercept_s",
            "per_prefill_token_s",
            "per_decode_seq_s",
            "per_context_token_s",
            "per_prefill_attention_s",
            "per_prefill_seq_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not (np.isfinite(value) and value >= 0):
                raise ValueError(f"cost model coefficient {name} must be >= 0, got {value!r}")
            if value > MAX_COEFFICIENT_S:
                raise ValueError(f"cost model coefficient {name} must be <= "
                                 f"{MAX_COEFFICIENT_S:g} s (beyond any engine), got {value!r}")
        if self.intercept_s <= 0:
            raise ValueError(f"cost model intercept_s must be > 0, got {self.intercept_s!r}")

    def step_time(
        self,
        num_prefill_tokens: F,
        num_decode_seqs: F,
        num_context_tokens: F,
        prefill_attention: F,
        num_prefill_seqs: F,
    ) -> F:
        return (
            self.intercept_s
            + self.per_prefill_token_s * num_prefill_tokens
            + self.per_decode_seq_s * num_decode_seqs
            + self.per_context_token_s * num_context_tokens
            + self.per_prefill_attention_s * prefill_attention
            + self.per_prefill_seq_s * num_prefill_seqs
        )

    def decode_step_times(
        self, num_decode_seqs: int, first_context: int, num_steps: int
    ) -> npt.NDArray[np.float64]:
        """:func:`~kvbudget.perf.step_features.decode_step_times` of this model."""
        return decode_step_times(self.step_time, num_decode_seqs, first_context, num_steps)

    def scaled(self, factor: float, source: str) -> LinearCostModel:
        """Every step ``factor`` times as long (a calibration refreshed by one speed ratio)."""
        if not (np.isfinite(factor) and factor > 0):
            raise ValueError(f"scale factor must be > 0, got {factor!r}")
        return LinearCostModel(
            self.intercept_s * factor,
            self.per_prefill_token_s * factor,
            self.per_decode_seq_s * factor,
            self.per_context_token_s * factor,
            self.per_prefill_attention_s * factor,
            self.per_prefill_seq_s * factor,
            source=source,
        )

    def describe(self) -> dict[str, Any]:
        return {"kind": "linear", **asdict(self)}


@dataclass(frozen=True, slots=True)
class FrontendCost:
    """What the server's API front end adds to a request outside the engine's steps, as its
    client sees it: ``per_request_s`` (HTTP request handling, chat template and tokenisation,
    the hop to the engine process, before the request reaches the engine's queue) plus
    ``per_prompt_token_s`` per prompt token, and ``per_output_token_s`` per output token
    (detokenisation and one SSE event each, the first token's included in TTFT); at the end of
    the stream ``post_decode_s`` once (finishing the response: E2E only). Engine-side
    recordings (``AsyncLLM`` driven in-process) have none: ``FRONTENDS["none"]``. Sources:
    docs/fidelity.md, "API server".
    """

    per_request_s: float = 0.0
    per_prompt_token_s: float = 0.0
    per_output_token_s: float = 0.0
    post_decode_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_request_s", "per_prompt_token_s", "per_output_token_s",
                     "post_decode_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"frontend {name} must be >= 0, got {value!r}")

    def first_token_delay_s(self, prompt_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Before the first token: the request's set-up, its prompt, and the first token's own
        detokenisation and event."""
        return (self.per_request_s + self.per_output_token_s
                + self.per_prompt_token_s * prompt_tokens.astype(np.float64))

    def finish_delay_s(
        self, prompt_tokens: npt.NDArray[np.int64], output_tokens: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """Before the end of the stream: the first token's delay, every later token's, and the
        response's finish."""
        later = np.maximum(output_tokens.astype(np.float64) - 1.0, 0.0)
        return (self.first_token_delay_s(prompt_tokens) + self.per_output_token_s * later
                + self.post_decode_s)

    @property
    def is_zero(self) -> bool:
        return not (self.per_request_s or self.per_prompt_token_s or self.per_output_token_s
                    or self.post_decode_s)


# vLLM's OpenAI API server (``vllm serve``) as an HTTP client sees it, from the alpha
# coefficients that BLIS (inference-sim/inference-sim, defaults.yaml
# ``trained_physics_coefficients``) fitted to client-side recordings (inference-perf over HTTP)
# of vLLM on H100 (Llama-2-7B TP1, Llama-3.1-70B TP4, Mistral-Nemo, Qwen2.5-7B, Yi-34B, Scout):
# - per_prompt_token_s 1.22 us: what vLLM does with each prompt token before its engine's
#   queue that has a published cost: the tokeniser (one HF fast-tokenizer call in one thread,
#   vllm/renderers/base.py:628-643 in 0.32.0), 1.1 s for a 4 MB (about 1M-token) document
#   (charlesxu.io/parallel-tokenizer; vllm#10635: "a few hundred milliseconds" for 256K), and
#   the prefix cache's sha256 block hashes in the engine core's input thread (core.py:1103),
#   "100-200ns per token (~6ms for 50k tokens)" (vLLM docs/design/prefix_caching.md, #29261):
#   1.1 + 0.12 us.
# - per_request_s 11.3 ms: BLIS's alpha0 (15.56 ms, "QueueingTime", before the request enters
#   the engine's queue, so in TTFT and E2E) less the part of it that stands for prefill work
#   BLIS's step model leaves out (its prefill-compute correction is 0.15) and kvbudget's does
#   not: at BLIS's training shape (Llama-2-7B, H100, a 466-713-token prompt at idle) BLIS's
#   client TTFT is 23.0-23.5 ms and kvbudget's engine-side TTFT 9.5-13.7 ms, so 9.7-13.4 ms
#   is the front end's; 12 ms at the 566-token (100 system + 466 question) point, of which
#   566 x per_prompt_token_s is the prompt's: 12 ms - 0.69 ms.
# - per_output_token_s 45.9 us: alpha2 ("OutputTokenProcessingTime", streaming
#   detokenisation), which BLIS adds to the first token and to every inter-token gap.
# - post_decode_s 0.78 ms: alpha1 ("PostDecodeFixedOverhead"), once at the end: E2E only.
# Derivation and citations: docs/fidelity.md, "API server".
FRONTENDS: dict[str, FrontendCost] = {
    "none": FrontendCost(),
    "vllm-api-server": FrontendCost(
        per_request_s=12.0e-3 - 566 * 1.22e-6, per_prompt_token_s=1.22e-6,
        per_output_token_s=45.9e-6, post_decode_s=0.78e-3,
    ),
}


def get_frontend(name: str) -> FrontendCost:
    try:
        return FRONTENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown frontend {name!r}; known: {', '.join(FRONTENDS)}"
        ) from None


def save_cost_model(
    model: CostModel, path: Path, extra: dict[str, Any] | None = None
) -> None:
    """Write a cost model (and optional provenance, fit errors) as JSON.

    A :class:`LinearCostModel` is written as ``{"kind": "linear", "coefficients": {...}}``; the
    default step model (:class:`~kvbudget.perf.step_time.VllmStepModel`) as ``{"kind":
    "vllm-v1", "gpu": {...}, "model": NAME, "parameters": {...}, "tensor_parallel_size": ...}``
    (the GPU's figures in full, the model by the name or path ``get_model`` resolves); any other
    model as its ``describe()``: ``{"kind": ..., "parameters": {...}}`` (the roofline's GPU and
    model names and its float fields), which :func:`load_cost_model` reads back."""
    payload: dict[str, Any]
    if isinstance(model, LinearCostModel):
        payload = {"kind": "linear", "coefficients": asdict(model), **(extra or {})}
    elif isinstance(model, VllmStepModel):
        payload = {"kind": model.KIND, **model.to_json(), **(extra or {})}
    else:
        described = dict(model.describe())
        kind = described.pop("kind")
        payload = {"kind": kind, "parameters": described, **(extra or {})}
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class CostFile:
    """A cost-model file read once: its step-time ``model``, its ``frontend_overhead_s`` and
    the whole ``payload`` (its ``fitted_on`` and ``calibration`` blocks, which their readers
    take from it); ``warned``: the lines its calibration warned of (``calibration.warnings``:
    a fitted value at a bound of its search or outside its published range), which every
    command that loads it says again."""

    path: Path
    model: CostModel
    frontend_overhead_s: float
    payload: dict[str, Any]
    warned: tuple[str, ...] = ()


def read_cost_file(path: Path) -> CostFile:
    """``path`` read and checked once (errors name the file and the field)."""
    payload = _read_payload(path)
    return CostFile(path, _model_from_payload(path, payload),
                    _frontend_overhead(path, payload), payload, fit_warnings(path, payload))


def fit_warnings(path: Path, payload: dict[str, Any]) -> tuple[str, ...]:
    """The ``calibration.warnings`` of a cost file, validated by pydantic (a list of lines; a
    file without them, from ``calibrate --url``, ``profile`` or before, has none)."""
    from pydantic import TypeAdapter, ValidationError

    section = payload.get("calibration")
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise ValueError(f"{path}: field 'calibration' must be an object")
    try:
        lines = TypeAdapter(list[str]).validate_python(section.get("warnings", []),
                                                       strict=True)
    except ValidationError:
        raise ValueError(f"{path}: field 'calibration.warnings' must be a list of "
                         "strings") from None
    return tuple(line for line in lines if line.strip())


def read_frontend_overhead(path: Path) -> float:
    """The ``frontend_overhead_s`` of a cost-model file (0 when it has none): what the server's
    API front end adds to every request's first token and finish outside the engine's steps,
    as ``kvbudget calibrate`` measured it."""
    return read_cost_file(path).frontend_overhead_s


def _frontend_overhead(path: Path, payload: dict[str, Any]) -> float:
    value = payload.get("frontend_overhead_s", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        np.isfinite(value) and value >= 0
    ):
        raise ValueError(f"{path}: field 'frontend_overhead_s' must be a number >= 0")
    if value > MAX_FRONTEND_OVERHEAD_S:
        raise ValueError(f"{path}: field 'frontend_overhead_s' must be <= "
                         f"{MAX_FRONTEND_OVERHEAD_S:g} s (an API server adding a minute to "
                         f"every request is beyond any deployment), got {value!r}")
    return float(value)


def load_cost_model(path: Path) -> CostModel:
    """Read a cost-model file written by :func:`save_cost_model`; errors name the field."""
    return _model_from_payload(path, _read_payload(path))


def _read_payload(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: not a readable cost-model JSON file "
                         f"({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a cost-model JSON file (not UTF-8 text: byte "
                         f"{exc.start})") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a readable cost-model JSON file ({exc})") from None
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: field 'kind' must be 'linear', 'vllm-v1' or 'roofline'")
    return payload


_OTHER_FILES = (
    (frozenset({"policy", "overall", "tiers"}), "a run's summary (simulate, replay or serve "
     "--out), not a cost model: kvbudget calibrate --records RUN_DIR --out FILE fits one to a "
     "measured run"),
    (frozenset({"metrics", "per_request", "num_compared"}), "validate's comparison "
     "(validation.json), not a cost model: give the cost-model file it validated"),
    (frozenset({"axes", "num_points", "num_runs"}), "a study's description (sweep.json), not "
     "a cost model"),
    (frozenset({"gpus", "tensor_parallel", "replicas", "prices_usd_per_gpu_hour"}),
     "a plan's result (plan --out: plan.json), not a cost model"),
    (frozenset({"metric", "rel_tol", "policies"}), "a capacity search's result (capacity "
     "--out: capacity.json), not a cost model"),
)
"""kvbudget's other JSON files, told apart by the keys they always write (a run's
``summary.json``, ``validation.json``, ``sweep.json``, ``plan.json``, ``capacity.json``; the partial file's: ``_PARTIAL``):
given where a cost model is wanted, each was told "field 'kind' must be 'linear', 'vllm-v1'
or 'roofline'", as if a cost model lacked a field."""

_PARTIAL = frozenset({"done", "samples", "server"})
"""Keys of the measurements an interrupted ``calibrate --url`` keeps beside its ``--out``
(``live.calibrate_partial.CalibrationProgress``: ``cost.json`` -> ``cost.partial.json``)."""


def _refuse_other_file(path: Path, payload: dict[str, Any]) -> None:
    if payload.keys() >= _PARTIAL:
        server = payload.get("server")
        url = server.get("url") if isinstance(server, dict) else None
        out = path.with_name(path.name.removesuffix(".partial.json") + ".json") \
            if path.name.endswith(".partial.json") else None
        rerun = (f" (--url {url} --out {shlex.quote(str(out))} ...)"
                 if isinstance(url, str) and out is not None else "")
        raise ValueError(
            f"{path}: the grid measurements an interrupted calibrate --url kept, not a cost "
            f"model: {out or 'its --out'} is fitted and written once the whole grid is "
            f"measured; rerun the same calibrate command{rerun} with --resume")
    for keys, what in _OTHER_FILES:
        if payload.keys() >= keys:
            raise ValueError(f"{path}: {what}")


def _model_from_payload(path: Path, payload: dict[str, Any]) -> CostModel:
    kind = payload.get("kind")
    if kind is None:
        _refuse_other_file(path, payload)
    if kind == "vllm-v1":
        try:
            return VllmStepModel.from_json(payload, embedded_model(payload))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    if kind == "roofline":
        return _load_roofline(path, payload)
    if kind != "linear":
        raise ValueError(f"{path}: field 'kind' must be 'linear', 'vllm-v1' or 'roofline'")
    coefs = payload.get("coefficients")
    if not isinstance(coefs, dict):
        raise ValueError(f"{path}: field 'coefficients' must be an object")
    known = set(LinearCostModel.__dataclass_fields__)
    unknown = sorted(set(coefs) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field 'coefficients.{unknown[0]}'")
    try:
        return LinearCostModel(**coefs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _load_roofline(path: Path, payload: dict[str, Any]) -> CostModel:
    params = payload.get("parameters")
    if not isinstance(params, dict):
        raise ValueError(f"{path}: field 'parameters' must be an object")
    params = dict(params)
    try:
        gpu = get_gpu(str(params.pop("gpu")))
        model = get_model(str(params.pop("model")))
    except KeyError as exc:
        raise ValueError(f"{path}: field 'parameters.{exc.args[0]}' is missing") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    known = {f for f in RooflineCostModel.__dataclass_fields__ if not f.startswith("_")}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field 'parameters.{unknown[0]}'")
    try:
        return RooflineCostModel(gpu, model, **params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def model_config(model: ModelSpec) -> dict[str, Any]:
    """Every field of ``model`` as JSON (what :func:`model_from_config_block` reads back)."""
    return asdict(model)


def model_from_config_block(block: Any, where: str) -> ModelSpec:
    """The :class:`ModelSpec` :func:`model_config` wrote; ``ValueError`` naming ``where``."""
    if not isinstance(block, dict):
        raise ValueError(f"field '{where}' must be an object")
    data = dict(block)
    try:
        for key, cls in (("moe", MoESpec), ("mla", MLASpec)):
            sub = data.get(key)
            if sub is not None:
                if not isinstance(sub, dict):
                    raise ValueError(f"field '{where}.{key}' must be an object or null")
                data[key] = cls(**sub)
        return ModelSpec(**data)
    except TypeError as exc:
        raise ValueError(f"field '{where}': {exc}") from None


def embedded_model(payload: dict[str, Any]) -> ModelSpec | None:
    """The model shapes a file embeds (``fitted_on.model.config``), ``None`` when it has none;
    ``ValueError`` naming the field."""
    block = payload.get("fitted_on")
    model_block = block.get("model") if isinstance(block, dict) else None
    if not isinstance(model_block, dict) or "config" not in model_block:
        return None
    return model_from_config_block(model_block["config"], "fitted_on.model.config")
