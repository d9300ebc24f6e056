"""`kvbudget report`: two simulated runs give one self-contained HTML file whose embedded images
are valid PNGs (the same bytes as the PNG files), and which headless Chromium renders with every
image loaded (when Chromium is installed)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.analysis.report import REPORT_FILE, build_report, gpu_shown, run_labels
from kvbudget.cli.main import app
from kvbudget.results.run_result import RunResult, read_run

CHROMIUM = Path("/usr/bin/chromium")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.links: list[str] = []
        self.tables = 0
        self.headings: list[str] = []
        self._in_h = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.images.append(a)
        if tag in ("link", "script", "iframe") or "href" in a:
            self.links.append(a.get("href") or a.get("src") or tag)
        if tag == "table":
            self.tables += 1
        self._in_h = tag == "h2"

    def handle_data(self, data: str) -> None:
        if self._in_h:
            self.headings.append(data.strip())
            self._in_h = False


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from kvbudget.policies.registry import make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig, simulate
    from tests.conftest import mixed_workload

    base = tmp_path_factory.mktemp("runs")
    w = mixed_workload(300, rate_rps=10.0, seed=0)
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=2500), seed=0, timeline_period_s=0.5)
    dirs = []
    grid: list[tuple[str, str, dict[str, Any]]] = [
        ("cons", "conservative", {"batch_on_overload": "reject"}),
        ("over", "overcommit", {"overcommit_ratio": 0.2}),
    ]
    for name, policy, params in grid:
        run = simulate(w, make_policy(policy, params), cfg)
        run.write(base / name)
        dirs.append(base / name)
    return dirs


def check_report(out: Path, expected_figures: int) -> Page:
    html_text = (out / REPORT_FILE).read_text(encoding="utf-8")
    page = Page()
    page.feed(html_text)
    assert page.links == [], f"the report refers to outside resources: {page.links}"
    assert len(page.images) == expected_figures
    files = sorted(out.glob("*.png"))
    assert len(files) == expected_figures
    for img, path in zip(page.images, files, strict=True):
        src = img["src"]
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        w, h = png_size(data)
        assert 600 <= w <= 2000 and 200 <= h <= 2500, (path.name, w, h)
        assert data == path.read_bytes()
        assert img["alt"]
    return page


@pytest.fixture(scope="module")
def cli_report(two_runs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report"
    result = CliRunner().invoke(app, ["report", *map(str, two_runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out / REPORT_FILE} and 9 PNG files" in result.output
    return out


def test_report_on_two_runs(two_runs: list[Path], cli_report: Path) -> None:
    page = check_report(cli_report, expected_figures=9)
    assert page.headings == ["Runs", "Outcomes", "Latency", "KV cache", "Figures"]
    assert page.tables == 5
    text = (cli_report / REPORT_FILE).read_text()
    # inter-token latency, from each run's summary: a row per run and tier, the summary's p99
    itl = text.split("Inter-token latency")[1].split("</table>")[0]
    run0 = read_run(two_runs[0]).summary
    assert itl.count("<tr>") == 1 + 2 * (1 + len(run0["tiers"]))  # the header, the rows
    assert f"{run0['tiers']['batch']['itl_s']['p99']:.3g}" in itl
    for label in ("conservative", "overcommit", "interactive", "batch", "no_capacity",
                  "overcommit_ratio=0.2"):
        assert label in text
    names = sorted(p.name for p in cli_report.glob("*.png"))
    assert names[0] == "01_latency_cdf.png" and "07_kv_timeline.png" in names
    offered = read_run(two_runs[0]).summary["tiers"]["interactive"]["offered"]
    assert f'<td>interactive</td><td class="n">{offered:,}</td>' in text


def test_report_compares_with_a_measured_run(two_runs: list[Path], tmp_path: Path) -> None:
    # the first run's records as a live replay's run (--measured takes only a live run: a
    # simulation there is refused, test_round_trips)
    measured = tmp_path / "measured"
    shutil.copytree(two_runs[0], measured)
    summary = json.loads((measured / "summary.json").read_text())
    (measured / "summary.json").write_text(json.dumps({**summary, "executor": "live"}))
    rep = build_report(two_runs, tmp_path / "a", measured=measured, num_resamples=200)
    page = check_report(tmp_path / "a", expected_figures=11)
    assert len(rep.png_paths) == 11
    assert "Simulated against measured" in page.headings
    text = rep.html_path.read_text()
    # the measured run against itself: every quantile has a zero relative error
    first = text.split("Simulated against measured")[1].split("</table>")[0]
    assert len(re.findall(r"<small>([^<]*)</small>", first)) == 2 * 3 * 3
    assert set(re.findall(r"<small>([^<]*)</small>", first)) == {"+0.0%"}
    # which way a relative error points is said (it was "the relative error of the quantile")
    assert "(simulated - measured) / measured: + where the simulation is higher" in first


def test_bad_run_dir_is_one_line_and_exit_2(two_runs: list[Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget.cli.main", "report", str(two_runs[0]), str(missing), "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3],
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(missing) in lines[0] and "not a run directory" in lines[0]
    broken = tmp_path / "broken"
    shutil.copytree(two_runs[0], broken)
    (broken / "summary.json").write_text("{not json")
    result = CliRunner().invoke(app, ["report", str(broken), "--out", str(tmp_path / "o2")])
    assert result.exit_code == 2
    assert "summary.json: not valid JSON" in result.output


def test_report_on_a_run_without_completions_or_timeline(two_runs: list[Path],
                                                         tmp_path: Path) -> None:
    """A replay whose requests all failed and whose server was never scraped still reports."""
    run = read_run(two_runs[0])
    rec = dict(run.record_columns)
    n = len(rec["request_id"])
    rec["status"] = np.array(["rejected_overloaded"] * n, dtype=object)
    rec["reason"] = np.array(["backend_error"] * n, dtype=object)
    for col in ("admitted_s", "first_token_s", "finished_s", "ttft_s", "tpot_s", "e2e_s"):
        rec[col] = np.full(n, np.nan)
    empty = {k: np.asarray(v)[:0] for k, v in run.timeline_columns.items()}
    RunResult(rec, empty, {"policy": "conservative"}).write(tmp_path / "failed")
    rep = build_report([tmp_path / "failed", two_runs[1]], tmp_path / "out", num_resamples=50)
    check_report(tmp_path / "out", expected_figures=9)
    assert "backend_error" in rep.html_path.read_text()


def test_run_labels_disambiguate_repeated_policies() -> None:
    dirs = [Path("x/a"), Path("y/b"), Path("z/b"), Path("w/c")]
    summaries = [{"policy": "overcommit"}, {"policy": "overcommit"}, {"policy": "overcommit"},
                 {"policy": "conservative"}]
    assert run_labels(dirs, summaries) == [
        "overcommit (a)", "overcommit (b) #1", "overcommit (b) #2", "conservative"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed (/usr/bin/chromium)")
def test_chromium_renders_the_report_with_every_image(cli_report: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    shutil.copytree(cli_report, out)
    # a copy of the report that writes, once loaded, how many images decoded
    probe = out / "probe.html"
    script = (
        "<script>window.addEventListener('load', () => {"
        "const imgs = Array.from(document.images);"
        "document.title = 'loaded ' + imgs.filter(i => i.complete && i.naturalWidth > 0).length"
        " + ' of ' + imgs.length; });</script>"
    )
    probe.write_text((out / REPORT_FILE).read_text().replace("</body>", script + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=5000"]
    dom = subprocess.run([str(CHROMIUM), *flags, "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert "<title>loaded 9 of 9</title>" in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), *flags, "--hide-scrollbars", "--window-size=1280,6000",
                    f"--screenshot={shot}", (out / REPORT_FILE).as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert png_size(shot.read_bytes()) == (1280, 6000)
    from matplotlib.image import imread

    pixels = imread(str(shot))
    # the lower part of the page is figures, not blank
    assert pixels[3000:, :, :3].std() > 0.05


def test_the_report_says_what_the_runs_assumed(tmp_path: Path) -> None:
    """A run of a trace that names no tier, no max_tokens and no arrival times: the report
    lists the warning and the assumptions under its runs table, each once with its runs."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("prompt_tokens,output_tokens\n" + "100,20\n" * 20)
    runs = [tmp_path / "a", tmp_path / "b"]
    for run_dir, policy in zip(runs, ("conservative", "unlimited"), strict=True):
        res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", policy,
                                       "--out", str(run_dir)])
        assert res.exit_code == 0, res.output
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = (out / REPORT_FILE).read_text()
    said = text.split("What the inputs did not say and the runs assumed:")[1].split("</ul>")[0]
    assert said.count("<li>") == 3
    assert "<li>warning: the file has no arrival times: Poisson arrivals at 1 req/s" in said
    assert "<li>assumed: the file names no tier: every request is &#x27;interactive&#x27;" in said
    assert said.count("(conservative, unlimited)") == 3


def test_the_report_shows_the_throughput_the_tables_show(two_runs: list[Path],
                                                         cli_report: Path) -> None:
    """The outcomes table's throughput is the one simulate's and compare's tables call `out
    tok/s` (over the run, first arrival to last finish); it showed the arrival-window rate under
    'output tokens/s', a different figure for the same run."""
    outcomes = (cli_report / REPORT_FILE).read_text().split("Outcomes per run")[1]
    outcomes = outcomes.split("</table>")[0]
    assert "output tok/s over the run" in outcomes
    batch = read_run(two_runs[0]).summary["tiers"]["batch"]
    over_run, window = batch["sustained_output_tokens_per_s"], batch["output_tokens_per_s"]
    assert over_run < window  # the run drains after its last arrival
    shown = f"{over_run:,.0f}" if over_run >= 1000 else f"{over_run:.3g}"
    assert f'<td class="n">{shown}</td>' in outcomes
    # the runs table's duration is that span, and says so (it exceeds the workload's window)
    text = (cli_report / REPORT_FILE).read_text()
    assert ("duration: first arrival to last finish, the arrival window and the drain after "
            "the last arrival") in text


def test_the_report_says_what_a_run_warned_of(tmp_path: Path) -> None:
    """A draft model larger than its target: the run keeps the warning (summary's
    ``warnings``) and the report lists it with the assumptions."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.1},100,20\n" for i in range(10)))
    res = CliRunner().invoke(app, [
        "simulate", "--trace", str(trace), "--out", str(tmp_path / "a"),
        "--set", 'engine.speculative_config.method="draft_model"',
        "--set", 'engine.speculative_config.model="Llama-3.1-70B"',
        "--set", "engine.speculative_config.num_speculative_tokens=3",
        "--set", "engine.speculative_config.acceptance_rate=0.7"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path / "a"), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    said = (tmp_path / "r" / REPORT_FILE).read_text().split(
        "What the inputs did not say and the runs assumed:")[1].split("</ul>")[0]
    assert "<li>warning: engine.speculative_config.model: draft model" in said


def test_a_live_runs_model_is_the_one_its_server_said(two_runs: list[Path],
                                                       tmp_path: Path) -> None:
    """A replay's or serve's run directory has no simulated model in its summary: the Runs
    table showed '–' though replay.json names what the server loaded; it now shows that."""
    live = tmp_path / "live"
    shutil.copytree(two_runs[0], live)
    summary = json.loads((live / "summary.json").read_text())
    summary.pop("model", None)
    (live / "summary.json").write_text(json.dumps(summary))
    (live / "replay.json").write_text(json.dumps({"executor": "serve", "server": {
        "model": "llama", "model_root": "meta-llama/Llama-3.1-8B-Instruct"}}))
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(live), "--out", str(out)])
    assert result.exit_code == 0, result.output
    runs = (out / REPORT_FILE).read_text().split("</table>")[0]
    assert "<td>served: meta-llama/Llama-3.1-8B-Instruct</td>" in runs


def test_the_runs_table_names_the_gpu_as_simulate_does(two_runs: list[Path],
                                                        tmp_path: Path) -> None:
    """The Runs table printed the GPU as given (``H100-80GB``) where simulate's and validate's
    settings line says ``H100-SXM`` (:func:`~kvbudget.perf.hardware.gpu_label`): one label."""
    summary = json.loads((two_runs[0] / "summary.json").read_text())
    assert summary["gpu"] == "H100-80GB"  # the default scenario's, as given
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(two_runs[0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    runs = (out / REPORT_FILE).read_text().split("</table>")[0]
    assert "<td>H100-SXM</td>" in runs and "H100-80GB" not in runs
    # hand-made: no cost model block (a replay), a GPU file gone, none named
    assert gpu_shown({"gpu": "H100-80GB"}) == "H100-SXM"
    assert gpu_shown({"gpu": "A100-80GB", "cost_model": {"gpu": "A100-80GB"}}) == "A100-80GB"
    gone = str(tmp_path / "mine.json")
    assert gpu_shown({"gpu": gone}) == gone
    assert gpu_shown({}) == "–" and gpu_shown({"gpu": None}) == "–"


def test_the_report_says_each_runs_engine_features_as_simulate_does(tmp_path: Path) -> None:
    """A disaggregated run and a speculative one: the report said nothing of either (no
    transfers, pools, acceptance), where simulate prints a line for each; its 'Engine
    features' section now has those lines, each run by its report label, the same text as
    the screen's (its lines joined), and a run with no feature adds none."""
    base = ["simulate", "--set", "workload.duration_s=5"]
    features = {
        "disagg": ["--set", "disaggregation.prefill.num_replicas=1",
                   "--set", "disaggregation.decode.num_replicas=1"],
        "spec": ["--set", "engine.speculative_config.method=eagle3",
                 "--set", "engine.speculative_config.num_speculative_tokens=3",
                 "--set", "engine.speculative_config.acceptance_length=2.5"],
        "plain": [],
    }
    screens = {}
    for name, args in features.items():
        res = CliRunner().invoke(app, [*base, *args, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        screens[name] = " ".join(res.stdout.split())
    out = tmp_path / "report"
    dirs = [str(tmp_path / name) for name in features]
    res = CliRunner().invoke(app, ["report", *dirs, "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = (out / REPORT_FILE).read_text()
    section = text.split("<h2>Engine features</h2>")[1].split("<h2>")[0]
    items = re.findall(r"<li>(.*?)</li>", section)
    assert len(items) == 2
    labels = run_labels([Path(d) for d in dirs], [read_run(Path(d)).summary for d in dirs])
    for item, name, label in zip(items, ("spec", "disagg"), (labels[1], labels[0]), strict=True):
        line = item.replace("&#x27;", "'")
        head, rest = line.split(f"{label}: ", 1)  # the run's label for the screen's policy
        assert head + "conservative: " + rest in screens[name]
    assert items[0].startswith("speculative decoding: ")
    assert items[1].startswith("disaggregated, over infiniband-ndr")
