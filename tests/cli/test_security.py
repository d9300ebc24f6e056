"""Security checks (issue 20 item 4): secrets stay secret, loaders never run code, the HTML
report escapes what came from its inputs. (``trace fetch`` refusing a file whose sha256 is not
the pinned or given one is tested in tests/cli/test_trace_cli.py: the corrupted download is
deleted and the error is one line.)"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.live.openai_client import ServerTarget, redact_url
from tests.conftest import REPO
from tests.unit.live.test_hostile_servers import (
    SSE_HEAD,
    Hostile,
    _chunk,
    _event,
    hostile,  # noqa: F401  (the fixture)
)

SECRET = "sk-TOPSECRET-0123456789"
PASSWORD = "hunter2-PASSWORD"


def _run(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args], env=env)
    return res.exit_code, res.stdout, res.stderr


def _everything_in(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def _trace(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": 0.01 * i, "prompt_tokens": 5,
                                        "output_tokens": 2, "tier": "batch"}) + "\n"
                            for i in range(n)))
    return path


def _echoing(server: Hostile) -> Any:
    """Answers the first completion 401 with the request's Authorization header in the body
    (as a careless proxy does), the rest normally; keeps every header it saw."""
    seen: list[str] = []

    def script(conn: Any, body: dict[str, Any]) -> None:
        seen.append(body.get("_auth", ""))
        if len(seen) == 1:
            key = server.last_auth  # type: ignore[attr-defined]
            raw = json.dumps({"error": {"message": f"bad key: {key}"}}).encode()
            conn.sendall(b"HTTP/1.1 401 X\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(raw)}\r\n".encode()
                         + b"Connection: close\r\n\r\n" + raw)
        else:
            conn.sendall(SSE_HEAD + _chunk(1) + _chunk(2, finish="length") + _event("[DONE]"))
    return script


@pytest.fixture
def auth_seen(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> list[str]:  # noqa: F811
    """The Authorization headers the server received (the key must reach the server)."""
    from tests.unit.live import test_hostile_servers as h

    seen: list[str] = []
    real = h._read_request

    def reading(conn: Any, *, body: bool, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        peek = conn.recv(65536, 2)  # MSG_PEEK: leave the bytes for the real reader
        m = re.search(rb"(?i)authorization: ([^\r\n]*)", peek)
        hostile.last_auth = m.group(1).decode() if m else ""  # type: ignore[attr-defined]
        seen.append(hostile.last_auth)  # type: ignore[attr-defined]
        return real(conn, body=body, **kwargs)

    monkeypatch.setattr(h, "_read_request", reading)
    hostile.completions = _echoing(hostile)
    return seen


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_api_key_never_shows(hostile: Hostile, auth_seen: list[str], tmp_path: Path,  # noqa: F811
                                 how: str) -> None:
    out = tmp_path / "run"
    args: list[object] = ["replay", "--url", hostile.url, "--trace", _trace(tmp_path), "--out",
                          out, "--poll-period", "0.05"]
    env = None
    if how == "flag":
        args += ["--api-key", SECRET]
    else:
        env = {"KVBUDGET_API_KEY": SECRET}
    code, stdout, stderr = _run(*args, env=env)
    assert code == 0, stderr
    assert f"Bearer {SECRET}" in auth_seen  # it was sent
    blob = _everything_in(out)
    assert b"HTTP 401" in blob and b"bad key: Bearer ***" in blob  # recorded, the key masked
    assert SECRET not in stdout + stderr
    assert SECRET.encode() not in blob
    assert SECRET not in repr(ServerTarget(hostile.url, api_key=SECRET))


def test_url_credentials_are_sent_but_never_printed(hostile: Hostile, auth_seen: list[str],  # noqa: F811
                                                    tmp_path: Path) -> None:
    url = hostile.url.replace("http://", f"http://admin:{PASSWORD}@")
    out = tmp_path / "run"
    code, stdout, stderr = _run("replay", "--url", url, "--trace", _trace(tmp_path), "--out",
                                out, "--poll-period", "0.05")
    assert code == 0, stderr
    assert any(a.startswith("Basic ") for a in auth_seen)
    assert PASSWORD not in stdout + stderr
    assert PASSWORD.encode() not in _everything_in(out)
    assert redact_url(url) == hostile.url
    # errors that name the server do not name the password either
    for bad in (f"ftp://admin:{PASSWORD}@127.0.0.1:1", f"http://admin:{PASSWORD}@127.0.0.1:1"):
        code, stdout, stderr = _run("replay", "--url", bad, "--trace", _trace(tmp_path),
                                    "--out", tmp_path / "r2")
        assert code in (1, 2) and stderr.startswith("error: "), stderr
        assert PASSWORD not in stdout + stderr


class _Boom:
    """Unpickling this runs code: it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("name", ["t.pkl", "t.parquet", "t.csv", "t.jsonl", "t.json"])
def test_loaders_never_unpickle(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "marker"
    payload = pickle.dumps(_Boom(marker))
    path = tmp_path / name
    path.write_bytes(payload)
    for args in (("trace", "stats", path), ("simulate", "--trace", path),
                 ("simulate", "--cost-model", path), ("report", tmp_path, "--out",
                                                      tmp_path / "rep")):
        code, _, stderr = _run(*args)
        assert code == 2 and "Traceback" not in stderr, (args, stderr)
    scenario = tmp_path / "s.toml"
    scenario.write_bytes(payload)
    code, _, stderr = _run("simulate", "--scenario", scenario)
    assert code == 2 and "Traceback" not in stderr
    assert not marker.exists()


def test_scenarios_and_traces_are_data_not_code(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    code_like = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'name = "{code_like}"\nseed = 1\n[engine]\nblock_size = "{code_like}"\n')
    code, _, stderr = _run("simulate", "--scenario", scenario)
    assert code == 2 and "block_size" in stderr
    code, _, stderr = _run("simulate", "--set", f"engine.block_size={code_like}")
    assert code == 2
    trace = tmp_path / "t.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,\"{code_like}\",1\n")
    code, _, stderr = _run("trace", "stats", trace)
    assert code == 2
    assert not marker.exists()


# The one module that may run compiled code it reads: the command line's cache of kvbudget's
# own dataclass methods, read from and written to the package's __pycache__ folder only (the
# trust of a .pyc file, which importlib reads with marshal too), never from a path a user names.
CODE_CACHE = "cli/method_cache.py"


def test_the_source_has_no_eval_or_unpickling() -> None:
    pattern = re.compile(r"\bpickle\b|(?<![.\w])eval\(|\bexec\(|yaml\.load\(|allow_pickle|"
                         r"read_pickle|\bmarshal\b|\bshelve\b|\bdill\b")
    found = []
    for pkg in ("policies", "workloads", "results", "perf", "analysis", "simulator", "studies",
                "live", "cli"):
        for path in (REPO / pkg).rglob("*.py"):
            if path.relative_to(REPO).as_posix() == CODE_CACHE:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line.split("#", 1)[0]):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []


def test_the_code_cache_reads_only_the_package_s_own_pycache() -> None:
    from kvbudget.cli import method_cache

    assert method_cache.default_path().parent.resolve() == \
        (REPO / "kvbudget" / "__pycache__").resolve()
    # made in one place, with the default path; no command passes a path of its own
    made = [f"{path.relative_to(REPO)}: {line.strip()}"
            for pkg in ("policies", "workloads", "results", "perf", "analysis", "simulator",
                        "studies", "live", "cli")
            for path in (REPO / pkg).rglob("*.py")
            for line in path.read_text().splitlines() if "MethodCache(" in line]
    assert made == ["cli/main.py: _methods = MethodCache()",
                    "cli/method_cache.py: cache = MethodCache()"]


HOSTILE = "<script>alert(1)</script>"


def test_the_html_report_escapes_its_inputs(tmp_path: Path) -> None:
    run_dir = tmp_path / "<img src=x onerror=alert(2)>"
    code, _, stderr = _run("simulate", "--set", "workload.num_requests=30", "--set",
                           f"name={HOSTILE}", "--out", run_dir)
    assert code == 0, stderr
    # whatever a run directory carries is input to the report (edited by hand, or written by
    # another tool): tier names become column and row headers, the rest table cells
    import pandas as pd

    rename = {"interactive": HOSTILE, "batch": QUOTED}
    df = pd.read_parquet(run_dir / "requests.parquet")
    df["tier"] = df["tier"].astype(object).map(rename)
    df.to_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["tiers"] = {rename[k]: v for k, v in summary["tiers"].items()}
    summary.update(scenario=HOSTILE, policy=HOSTILE, gpu=QUOTED, model=QUOTED)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "rep"
    code, _, stderr = _run("report", run_dir, "--out", out)
    assert code == 0, stderr
    html = (out / "report.html").read_text()
    assert HOSTILE not in html and "<img src=x" not in html
    assert "&lt;img src=x" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert "&quot;&gt;&lt;img src=x" in html


QUOTED = '"><img src=x onerror=alert(3)>'


def test_svg_figures_carry_no_input_text(tmp_path: Path) -> None:
    """A sweep's SVG figures: a hostile scenario name never reaches them as markup."""
    out = tmp_path / "sweep"
    code, _, stderr = _run("sweep", "--set", "workload.num_requests=30", "--set",
                           f"name={HOSTILE}", "--policies", "conservative,overcommit", "-r", "1",
                           "-j", "1", "--out", out)
    assert code == 0, stderr
    svgs = sorted(out.glob("*.svg"))
    assert svgs
    for svg in svgs:
        text = svg.read_text()
        assert "<script" not in text and "alert(1)" not in text, svg


def test_arrow_extension_metadata_is_never_unpickled(tmp_path: Path) -> None:
    """Parquet can name a Python extension type whose metadata is a pickle (pyarrow's old
    ``arrow.py_extension_type``): the trace, recording and run readers load it as plain data
    or refuse it, and never run it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = tmp_path / "marker"
    payload = pickle.dumps(_Boom(marker))
    field = pa.field("prompt_tokens", pa.int64(), metadata={
        b"ARROW:extension:name": b"arrow.py_extension_type",
        b"ARROW:extension:metadata": payload})
    schema = pa.schema([pa.field("arrival_s", pa.float64()), field,
                        pa.field("output_tokens", pa.int64())],
                       metadata={b"pandas": payload, b"kvbudget": payload})
    table = pa.table({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 6],
                      "output_tokens": [2, 3]}, schema=schema)
    trace = tmp_path / "t.parquet"
    pq.write_table(table, trace)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pq.write_table(table, run_dir / "requests.parquet")
    pq.write_table(table, run_dir / "timeline.parquet")
    (run_dir / "summary.json").write_text("{}")
    for args in (("trace", "stats", trace), ("simulate", "--trace", trace, "--out",
                                              tmp_path / "sim"),
                 ("report", run_dir, "--out", tmp_path / "rep"),
                 ("validate", "--records", trace, "--out", tmp_path / "val")):
        code, _, stderr = _run(*args)
        assert code in (0, 1, 2) and "Traceback" not in stderr, (args, stderr)
        assert code == 0 or stderr.startswith("error: "), (args, stderr)
    assert not marker.exists()
