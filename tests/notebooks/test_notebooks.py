"""The notebooks: committed without outputs, and each runs top to bottom on a fresh kernel
(nbclient, the `python3` kernel of this virtual environment) without an error."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXPECTED = ["01_tail_latency.ipynb", "02_kv_timeline.ipynb", "03_sim_vs_real.ipynb",
            "04_tuning.ipynb"]
SHARED = REPO.parent / "shared"
# inputs the notebooks read from the environment: the tests run them without any
INPUT_VARIABLES = ("KVBUDGET_MEASURED_RUN", "KVBUDGET_SIMULATED_RUN", "KVBUDGET_COST_MODEL",
                   "KVBUDGET_SWEEP_DIR")


def execute(nb: nbformat.NotebookNode, cwd: Path) -> None:
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()


def test_the_four_notebooks_are_there() -> None:
    assert [p.name for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a cell has an execution count"


def test_the_kernel_is_this_virtual_environments_python(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    cell = nbformat.v4.new_code_cell("import sys; print(sys.prefix)")  # type: ignore[no-untyped-call]
    nb.cells.append(cell)
    execute(nb, tmp_path)
    printed = nb.cells[0].outputs[0]["text"].strip()
    assert Path(printed).resolve() == Path(sys.prefix).resolve()


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder {SHARED} is missing")
    for name in INPUT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KVBUDGET_SHARED", str(SHARED))
    assert "KVBUDGET_MEASURED_RUN" not in os.environ
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    execute(nb, path.parent)  # raises CellExecutionError, naming the cell, on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} drew no figure"
    stderr = [o["text"] for o in outputs if o.get("name") == "stderr"]
    assert not [t for t in stderr if "Warning" in t], stderr


def test_the_docs_name_what_the_notebooks_read() -> None:
    """docs/analysis.md's notebooks section: the test it names exists and every KVBUDGET_*
    variable it names is one a notebook reads (it named KVBUDGET_REPO, which none does)."""
    import re

    text = (REPO / "docs" / "analysis.md").read_text()
    section = text[text.index("## Notebooks"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    for path in re.findall(r"`(tests/[\w/]+\.py)`", section):
        assert (REPO / path).is_file(), path
    read = set()
    for path in NOTEBOOKS:
        read |= set(re.findall(r"KVBUDGET_[A-Z_]+", path.read_text()))
    named = set(re.findall(r"KVBUDGET_[A-Z_]+", section))
    assert named and named <= read, named - read


def test_the_notebooks_name_folders_and_docs_that_exist() -> None:
    """A folder (`live/`), module or page a notebook's text names is in the checkout
    (notebook 03 named a `backends/` folder the project does not have)."""
    import re

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
        text = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
        named = re.findall(r"`([\w.-]+(?:/[\w.-]+)*(?:/|\.py|\.md))`", text)
        named += re.findall(r"\b(docs/[\w-]+\.md)", text)
        for name in named:
            if name.startswith("../shared/"):
                continue  # the shared data folder, beside the checkout
            assert (REPO / name).exists(), f"{path.name}: {name}"


def prose_and_code(name: str) -> tuple[str, str]:
    """A notebook's markdown as one line of words, and its code cells' source."""
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)  # type: ignore[no-untyped-call]
    text = " ".join(" ".join(c.source for c in nb.cells if c.cell_type == "markdown").split())
    return text, "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_the_tail_latency_notebook_says_its_load_and_what_its_p99_is() -> None:
    """Notebook 01 offered about 34 req/s to a GPU that completes about 21 ("enough to
    saturate"), and read the interactive p99 TTFT of 10 s behind a gateway as a tail that
    "shrinks": it is the admission deadline (the expired requests have no TTFT). Its first
    cell says how far past capacity the load is and its reading says the p99 is the deadline,
    each with the figure a cell asserts."""
    text, code = prose_and_code("01_tail_latency.ipynb")
    assert "far past what the GPU sustains" in text and "about 21 req/s" in text
    assert "abs(served_rps - 21) < 1" in code
    assert "as many as 30 % of the interactive requests" in text
    assert "assert max(attained.values()) < 0.3" in code
    assert "10 s admission deadline" in text and "so that p99 is the deadline" in text
    assert "abs(p99[label][\"interactive\"] - deadline) < 0.5" in code


def test_the_tail_latency_notebook_checks_that_a_retried_requests_ttft_is_from_its_first_try(
) -> None:
    """Notebook 01's retry section says "TTFT counts from the first attempt, as the user saw
    it" and no cell checked it (a request completed on its eighth attempt could as well have
    been timed from its last): the cell now asserts, on the batch-pipeline run, that each
    request completed after a retry has its first attempt's sending as its arrival and its
    TTFT from there."""
    text, code = prose_and_code("01_tail_latency.ipynb")
    assert "TTFT counts from the first attempt, as the user saw it" in text
    assert 'np.allclose(retried["arrival_s"], first_sent.loc[retried.index])' in code
    assert 'np.allclose(retried["ttft_s"], retried["first_token_s"] - retried["arrival_s"])' \
        in code


def test_the_kv_timeline_notebook_says_what_its_cell_checks_of_the_reserved_line() -> None:
    """Notebook 02 said the conservative run's reserved line "sits at the capacity" (it
    averages 90 % of it) with no cell checking it: the text gives the bound a cell asserts."""
    text, code = prose_and_code("02_kv_timeline.ipynb")
    assert "sits at the capacity" not in text
    assert "near the capacity (above 85 % of it on average)" in text
    assert 'assert reserved["conservative"] > 0.85' in code
    assert "(more than 20 points lower)" in text
    assert 'assert reserved["conservative"] - used["conservative"] > 0.2' in code


def test_the_tuning_notebook_checks_the_engine_its_introduction_names() -> None:
    """Notebook 04 said its in-process grid ran "on an H100-80GB with Llama-3.1-8B and 3,000
    KV blocks (48,000 tokens" with no cell checking it (notebook 02 checks its own copy of the
    setting, not this one): the grid's cell asserts each figure the text gives."""
    text, code = prose_and_code("04_tuning.ipynb")
    assert "H100-80GB with Llama-3.1-8B and 3,000 KV blocks (48,000 tokens" in text
    assert 'assert (config.gpu, config.model) == ("H100-80GB", "Llama-3.1-8B")' in code
    assert "assert config.resolved_num_gpu_blocks() * 16 == 48_000" in code


def test_the_sim_vs_real_notebook_checks_the_cost_model_its_introduction_names() -> None:
    """Notebook 03 says a measured run without ``KVBUDGET_COST_MODEL`` is simulated with the
    presets' default step model (``vllm-v1``), and with the stand-in the roofline: a cell
    asserted the roofline only. It asserts both now."""
    text, code = prose_and_code("03_sim_vs_real.ipynb")
    assert "the default is the GPU and model presets' default step model (`vllm-v1`" in text
    assert 'assert simulated.summary["cost_model"]["kind"] == "vllm-v1"' in code
    assert 'assert simulated.summary["cost_model"]["kind"] == "roofline"' in code


RATE_BY_HAND = re.compile(r"len\(workload\)\s*/\s*(float\()?\s*workload\.(span_s|arrival_s)")
"""A request rate counted by hand over the arrival window: ``n / span``."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_an_offered_rate_is_the_librarys(path: Path) -> None:
    """01 and 02 computed the offered rate as ``len(workload) / span`` (n / span), where the
    tables, ``trace stats`` and the conclusion line count arrivals over the arrival window as
    ``(n - 1) / span`` (``kb.mean_arrival_rate``, workloads/arrival_rate.py), and 01's served
    rate divided every offered request, not the completed ones, by the run's span: a notebook
    now takes the library's function, and its prose says which span a rate is over."""
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not RATE_BY_HAND.search(code), RATE_BY_HAND.search(code)
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown").replace("\n  ", " ")
    for said in re.findall(r"about \d+ req/s[^.;)]*", prose):
        assert "over" in said, said  # "about 14 req/s over the arrival window, ..."
