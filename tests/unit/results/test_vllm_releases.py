"""A recording of a vLLM server newer than the release kvbudget's ``vllm`` engine mirrors
(0.32.0) is told which defaults that release runs otherwise (kvbudget.results.vllm_releases).

Read from the PyPI sdists of vLLM 0.32.0, 0.33.0 and 0.34.0 (``vllm/config/cache.py:185``:
``DEFAULT_BLOCK_SIZE`` 64, 16 at 0.32.0's ``:72``; ``config/cache.py:395-405`` and
``config/vllm.py:3180-3262``: the extensible KV cache, on by default on CUDA and ROCm;
``config/vllm.py:1610-1637``: async scheduling no longer off by default for n-gram
speculative decoding, 0.32.0's ``:1597-1610``). Before this, a genai-bench run against
``--server-engine vLLM --server-version 0.34.0`` was simulated with 16-token blocks and a KV
cache sized as 0.32 sizes it, the settings line saying "the recording's server, vLLM 0.34.0"
and nothing of the difference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.vllm_defaults import VLLM_VERSION
from kvbudget.results.recorded_vllm_bench_client import V0_NOTE_SAID
from kvbudget.results.recordings import read_recording
from kvbudget.results.vllm_releases import (
    CHANGES,
    RELEASE_NOTE_SAID,
    SIMULATED_VLLM,
    release_of,
)
from tests.conftest import unwrapped

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
EXCERPT = FIXTURES / "published" / "genai-bench-baseten-qwen3-30b-excerpt"


def test_the_simulated_release_is_the_one_the_defaults_were_read_from() -> None:
    assert SIMULATED_VLLM == VLLM_VERSION
    assert [c.since for c in CHANGES] == sorted(c.since for c in CHANGES)


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("0.34.0", (0, 34)),
        ("v0.33.0", (0, 33)),
        ("0.33.1.dev12+g4ba787ec9", (0, 33)),
        ("0.34.0+cu129", (0, 34)),
        ("nightly", None),
    ],
)
def test_versions_as_servers_spell_them(version: str, release: tuple[int, int] | None) -> None:
    assert release_of(version) == release


def _with(tmp_path: Path, **meta: str) -> Path:
    shutil.copytree(EXCERPT, tmp_path / "run")
    path = tmp_path / "run" / "experiment_metadata.json"
    doc = json.loads(path.read_text())
    doc.update(meta)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("version", "said"),
    [
        (
            "0.34.0",
            [
                "block_size: 64 tokens a KV block (simulated: 16; to match, --block-size 64",
                "KV cache size: the extensible KV cache on CUDA and ROCm",
                "async scheduling with speculative decoding",
            ],
        ),
        (
            "0.33.0",
            [
                "async scheduling with speculative decoding: on with every speculative "
                "method, n-gram's included (simulated: off with ngram; to match, --set "
                "engine.async_scheduling=true"
            ],
        ),
        ("0.35.0", ["(read up to vLLM 0.34.0; later releases not read)", "block_size: 64"]),
        ("0.32.0", []),
    ],
)
def test_a_newer_vllm_server_is_told_what_defaults_it_ran(
    tmp_path: Path, version: str, said: list[str]
) -> None:
    rec = read_recording(_with(tmp_path, server_engine="vLLM", server_version=version))
    note = [n for n in rec.notes if RELEASE_NOTE_SAID in n]
    assert len(note) == (1 if said else 0)
    for words in said:
        assert words in note[0]
    if version == "0.33.0":
        assert "block_size" not in note[0]


def test_the_note_is_said_where_a_vllm_engine_is_simulated(tmp_path: Path) -> None:
    path = _with(tmp_path, server_engine="vLLM", server_version="0.34.0")
    result = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            "Qwen3-30B-A3B",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    out = " ".join(unwrapped(result.stderr + result.stdout))
    assert result.exit_code == 0, result.output
    assert (
        "the recording's server ran vLLM 0.34.0 (its file's server_version), whose engine "
        "defaults differ from vLLM 0.32.0's" in out
    )
    # SGLang's engine chosen in its place takes no vLLM flag: nothing said of vLLM's defaults
    result = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            "Qwen3-30B-A3B",
            "--engine",
            "sglang",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert RELEASE_NOTE_SAID not in " ".join(unwrapped(result.stderr + result.stdout))


def test_a_vllm_bench_file_of_a_033_client_says_what_its_server_may_have_run(
    tmp_path: Path,
) -> None:
    """A hand-made edge case (no vLLM 0.33 client runs here): the 0.32.0 fixture with the
    lists 0.33.0's ``vllm bench serve`` adds where the server sent per-request metrics
    (``vllm/benchmarks/serve.py``, ``_get_server_metrics_results``: ``server_queue_times`` and
    ``server_ttfts``, one a request, in seconds, from the stream's last chunk's ``metrics``,
    ``lib/endpoint_request_func.py`` ``_update_server_metrics``)."""
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    n = len(doc["ttfts"])
    doc.update(server_queue_times=[0.0004] * n, server_ttfts=[0.012] * n)
    path = tmp_path / "vllm-0.33.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path, seed=0)
    note = [n for n in rec.notes if RELEASE_NOTE_SAID in n]
    assert len(note) == 1
    assert note[0].startswith(
        "the file was written by vllm bench serve 0.33 or later (it "
        "saves server_queue_times and server_ttfts"
    )
    assert "if that server ran vLLM 0.34 (0.33: the first default below only)" in note[0]
    # the 0.32.0 file itself: nothing
    rec = read_recording(FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json", seed=0)
    assert not any(RELEASE_NOTE_SAID in n for n in rec.notes)


def test_docs_fidelity_lists_the_moved_defaults() -> None:
    """docs/fidelity.md's "Releases after 0.32.0" table: one row a change, its release and its
    flag those of :data:`CHANGES`."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "fidelity.md").read_text()
    section = text[text.index("**Releases after 0.32.0.**") :]
    section = section[: section.index("\n\n", section.index("| since"))]
    rows = [r.split(" | ") for r in section.splitlines() if r.startswith("| 0.")]
    assert [r[0].strip("| ") for r in rows] == [f"{c.since[0]}.{c.since[1]}.0" for c in CHANGES]
    for row, change in zip(rows, CHANGES, strict=True):
        flag = row[-1].strip("| `").split("`")[0]
        assert flag.split(" ")[0] in change.match, (flag, change.match)
    assert "| 16 | 64 |" in section and "64 tokens" in CHANGES[1].now


@pytest.mark.parametrize(("version", "v0"), [("v0.6.0", True), ("0.7.3", True), ("0.8.0", False)])
def test_a_server_version_before_v1_was_the_default_says_v0s_defaults(
    tmp_path: Path, version: str, v0: bool
) -> None:
    """genai-bench's README's own example, ``--server-engine vLLM --server-version v0.6.0``:
    the settings line said "the recording's server, vLLM v0.6.0" and the simulated engine took
    vLLM 0.32.0's defaults (prefix caching on, 1024 sequences a step on an H100) with nothing
    said, where a dated ``vllm bench serve`` file of that time gets the V0 note."""
    rec = read_recording(_with(tmp_path, server_engine="vLLM", server_version=version))
    said = [n for n in rec.notes if V0_NOTE_SAID in n]
    assert len(said) == (1 if v0 else 0)
    if v0:
        assert said[0].startswith(
            f"the recording's server ran vLLM {version} (its file's "
            "server_version), " + V0_NOTE_SAID + ": it ran the V0 engine"
        )
        assert "--max-num-seqs 256" in said[0]
