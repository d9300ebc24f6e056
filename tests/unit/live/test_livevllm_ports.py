"""The live tests' server harness replaces a port taken between finding it free and vLLM
binding it (CI once lost a run to that race: "OSError: [Errno 98] Address already in use").

A fake interpreter stands in for vLLM's: its first start prints vLLM's bind failure and exits
1; later starts answer ``/v1/models`` on the port they were given. No vLLM is needed.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.live.livevllm import PORT_TRIES, running_vllm

FAKE = textwrap.dedent("""\
    #!{python}
    import http.server, pathlib, sys
    starts = pathlib.Path({starts!r})
    n = int(starts.read_text()) if starts.exists() else 0
    starts.write_text(str(n + 1))
    if n < {fail_first}:
        print("OSError: [Errno 98] Address already in use", flush=True)
        sys.exit(1)
    port = int(sys.argv[sys.argv.index("--port") + 1])

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{{"data": []}}')

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
""")


def _fake_python(tmp_path: Path, fail_first: int, message_ok: bool = True) -> tuple[str, Path]:
    starts = tmp_path / "starts"
    text = FAKE.format(python=sys.executable, starts=str(starts), fail_first=fail_first)
    if not message_ok:
        text = text.replace("Address already in use", "no such model")
    fake = tmp_path / "python"
    fake.write_text(text)
    fake.chmod(0o755)
    return str(fake), starts


def test_a_port_lost_before_vllm_bound_it_is_replaced(tmp_path: Path) -> None:
    python, starts = _fake_python(tmp_path, fail_first=PORT_TRIES - 1)
    with running_vllm(python, tmp_path, tmp_path / "vllm.log") as (server, _):
        assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 200
    assert starts.read_text() == str(PORT_TRIES)


def test_it_gives_up_after_its_tries(tmp_path: Path) -> None:
    python, starts = _fake_python(tmp_path, fail_first=PORT_TRIES)
    with pytest.raises(RuntimeError, match="Address already in use"), \
            running_vllm(python, tmp_path, tmp_path / "vllm.log"):
        pass
    assert starts.read_text() == str(PORT_TRIES)


def test_any_other_failure_to_start_is_not_retried(tmp_path: Path) -> None:
    python, starts = _fake_python(tmp_path, fail_first=1, message_ok=False)
    with pytest.raises(RuntimeError, match="no such model"), \
            running_vllm(python, tmp_path, tmp_path / "vllm.log"):
        pass
    assert starts.read_text() == "1"
