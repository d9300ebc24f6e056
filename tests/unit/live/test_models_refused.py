"""A ``--url`` whose ``GET /v1/models`` is refused: the error says what to do. Before, it said
only ``.../v1/models answered HTTP 404`` (a URL that is no OpenAI-compatible server, e.g. a
web server on the port) or ``HTTP 401`` (a server started with ``--api-key``)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.server import BackendUnavailable, discover

URL = "http://127.0.0.1:30000"


def _refused(status: int, api_key: str | None = None) -> str:
    async def go() -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(status))
        async with httpx.AsyncClient(transport=transport) as client:
            await discover(client, ServerTarget(URL, api_key=api_key))

    with pytest.raises(BackendUnavailable) as caught:
        asyncio.run(go())
    return str(caught.value)


@pytest.mark.parametrize("status", [404, 405])
def test_a_url_that_is_no_openai_server_is_said(status: int) -> None:
    assert _refused(status) == (
        f"{URL}/v1/models answered HTTP {status}: --url {URL} is not the root of an "
        "OpenAI-compatible server (vLLM, SGLang, TGI and llama.cpp's server all answer GET "
        "/v1/models there)"
    )


def test_a_key_wanted_or_refused_names_the_flag() -> None:
    # vLLM's --api-key answers 401 without a key or with a wrong one
    assert _refused(401) == (
        f"{URL}/v1/models answered HTTP 401: the server wants an API key "
        "(--api-key or KVBUDGET_API_KEY)"
    )
    assert _refused(403, api_key="k") == (
        f"{URL}/v1/models answered HTTP 403: the server refused the API key given (--api-key "
        "or KVBUDGET_API_KEY)"
    )


def test_a_server_error_is_said_as_it_was() -> None:
    assert _refused(500) == f"{URL}/v1/models answered HTTP 500"
