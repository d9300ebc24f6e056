"""Download the public trace originals for users, verified against pinned checksums.

Each source names its published address and what pins its content:

- a SHA-256 (the Azure 2023 traces, as listed in ``shared/traces/SOURCES.md``; the Mooncake
  traces whose bytes we could hash);
- otherwise the git blob id (SHA-1 of ``"blob <size>\\0" + content``) of the file at a pinned
  commit of its repository, which identifies the content as firmly (BurstGPT_1, the Mooncake
  tool-agent and arXiv traces, served from that commit);
- nothing, for files published outside git whose hash we could not know (the Azure 2024 week-long
  traces and the BurstGPT release assets): pass ``sha256=`` (``--sha256``) to verify them; without
  it they download with a warning that prints the SHA-256 obtained.

``base_url`` replaces the directory part of the address (a mirror, or a loopback server in
tests): the file name stays.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal
from urllib.parse import urlsplit

_MOONCAKE = ("https://raw.githubusercontent.com/kvcache-ai/Mooncake/"
             "3b5a594133958449a1feaf1c9e0fc1b553e34a28/FAST25-release")
_BURSTGPT = "https://raw.githubusercontent.com/HPMLL/BurstGPT/e92f533b6c85ea7f4164fb3d97d1aa2c3edacbc8"
_AZURE_2023 = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data"
_AZURE_2024 = "https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace"
_BURSTGPT_RELEASE = "https://github.com/HPMLL/BurstGPT/releases/download/v1.2"

_CITE_AZURE_2023 = ("Patel et al., Splitwise: Efficient generative LLM inference using phase "
                    "splitting, ISCA 2024 (CC-BY 4.0)")
_CITE_AZURE_2024 = ("Stojkovic et al., DynamoLLM: Designing LLM Inference Clusters for "
                    "Performance and Energy Efficiency, HPCA 2025 (CC-BY 4.0)")
_CITE_BURSTGPT = ("Wang et al., BurstGPT: A Real-world Workload Dataset to Optimize LLM Serving "
                  "Systems, KDD 2025 (CC-BY 4.0)")
_CITE_MOONCAKE = ("Qin et al., Mooncake: Trading More Storage for Less Computation - A "
                  "KVCache-centric Architecture for Serving LLM Chatbot, FAST 2025 (Apache-2.0)")


@dataclass(frozen=True)
class Source:
    """A downloadable public trace."""

    name: str
    url: str
    citation: str
    sha256: str | None = None
    git_blob_sha1: str | None = None
    size: int | None = None
    description: str = ""

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source("azure-code-2023", f"{_AZURE_2023}/AzureLLMInferenceTrace_code.csv",
               _CITE_AZURE_2023,
               sha256="54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
               git_blob_sha1="62bd8109d0f2b1bc48206d397ecca48d8de03aab", size=320_117,
               description="Azure LLM inference 2023, code (1 h, 8,819 requests)"),
        Source("azure-conv-2023", f"{_AZURE_2023}/AzureLLMInferenceTrace_conv.csv",
               _CITE_AZURE_2023,
               sha256="2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
               git_blob_sha1="5b9219f2caf93bbbf95ec29894e206115658e235", size=719_188,
               description="Azure LLM inference 2023, conversation (1 h, 19,366 requests)"),
        Source("azure-code-2024", f"{_AZURE_2024}/AzureLLMInferenceTrace_code_1week.csv",
               _CITE_AZURE_2024, description="Azure LLM inference 2024, code (1 week; "
               "no published checksum)"),
        Source("azure-conv-2024", f"{_AZURE_2024}/AzureLLMInferenceTrace_conv_1week.csv",
               _CITE_AZURE_2024, description="Azure LLM inference 2024, conversation (1 week; "
               "no published checksum)"),
        Source("burstgpt-1", f"{_BURSTGPT}/data/BurstGPT_1.csv", _CITE_BURSTGPT,
               git_blob_sha1="f95dd2c84454b067fdd0973858c55ecfe31bdad7",
               description="BurstGPT, first 2 months (1.43 M rows, with failures)"),
        Source("burstgpt-2", f"{_BURSTGPT_RELEASE}/BurstGPT_2.csv", _CITE_BURSTGPT,
               description="BurstGPT release v1.2, second 2 months (no published checksum)"),
        Source("burstgpt-3", f"{_BURSTGPT_RELEASE}/BurstGPT_3.csv", _CITE_BURSTGPT,
               description="BurstGPT release v1.2, another 110 days, _3 layout "
               "(no published checksum)"),
        Source("mooncake-conversation", f"{_MOONCAKE}/traces/conversation_trace.jsonl",
               _CITE_MOONCAKE,
               sha256="b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
               git_blob_sha1="5a371794b81d7fc7487ec8a02a2c631bcc7fbdf8", size=3_029_533,
               description="Kimi conversation trace (timestamps quantised to ~3 s)"),
        Source("mooncake-synthetic", f"{_MOONCAKE}/traces/synthetic_trace.jsonl",
               _CITE_MOONCAKE,
               sha256="bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
               git_blob_sha1="e4838049c0dcfc358a5f24ab08251279475cba94", size=1_136_313,
               description="Mooncake synthetic trace (3,993 requests)"),
        Source("mooncake-toolagent", f"{_MOONCAKE}/traces/toolagent_trace.jsonl",
               _CITE_MOONCAKE, git_blob_sha1="b765599d1e0828b37f68d481563c385d3c11de54",
               description="Kimi tool-and-agent trace"),
        Source("mooncake-arxiv", f"{_MOONCAKE}/arxiv-trace/mooncake_trace.jsonl",
               _CITE_MOONCAKE, git_blob_sha1="d68d1c6ce27b35a168edc235d36d0202d233f0f2",
               description="Mooncake trace of the arXiv paper (1 h)"),
    )
}


class FetchError(ValueError):
    """A download that failed or did not verify (one line, naming the URL or file)."""


@dataclass(frozen=True)
class FetchResult:
    path: Path
    sha256: str
    verified: Literal["sha256", "git-blob", "unverified"]
    downloaded: bool
    """False when a verified copy was already there."""


def _digests(path: Path) -> tuple[str, str]:
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()


def _verify(path: Path, source: Source, sha256: str | None) -> tuple[
        Literal["sha256", "git-blob", "unverified"], str, str | None]:
    """(how it was verified, its sha256, the mismatch message or None)."""
    actual_sha, actual_blob = _digests(path)
    expected = sha256 or source.sha256
    if source.size is not None and sha256 is None and path.stat().st_size != source.size:
        return "sha256", actual_sha, (f"size {path.stat().st_size:,} bytes, expected "
                                      f"{source.size:,}")
    if expected is not None:
        if actual_sha != expected.lower():
            return "sha256", actual_sha, f"sha256 {actual_sha}, expected {expected.lower()}"
        if sha256 is None and source.git_blob_sha1 and actual_blob != source.git_blob_sha1:
            return "git-blob", actual_sha, (f"git blob {actual_blob}, expected "
                                            f"{source.git_blob_sha1}")
        return "sha256", actual_sha, None
    if source.git_blob_sha1 is not None:
        if actual_blob != source.git_blob_sha1:
            return "git-blob", actual_sha, (f"git blob {actual_blob}, expected "
                                            f"{source.git_blob_sha1}")
        return "git-blob", actual_sha, None
    return "unverified", actual_sha, None


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_loopback(url: str) -> bool:
    return is_loopback_host(urlsplit(url).hostname or "")


def source_url(source: Source, base_url: str | None) -> str:
    if base_url is None:
        return source.url
    if not re.match(r"^https?://", base_url):
        raise FetchError(f"base URL must start with http:// or https://, got {base_url!r}")
    return base_url.rstrip("/") + "/" + source.filename


def fetch(
    name: str,
    dest: str | Path,
    *,
    base_url: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: bool = True,
    timeout_s: float = 60.0,
    stream: IO[str] | None = None,
) -> FetchResult:
    """Download source ``name`` into directory ``dest`` and verify it.

    A verified copy already in ``dest`` is kept (``downloaded=False``); one that does not verify
    is an error unless ``force``. A failed or mismatching download is deleted.
    """
    import httpx
    from tqdm import tqdm

    if name not in SOURCES:
        raise FetchError(f"unknown trace {name!r}; choose one of {', '.join(SOURCES)}")
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise FetchError(f"--sha256 must be 64 hex digits, got {sha256!r}")
    source = SOURCES[name]
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise FetchError(f"{dest}: not a directory")
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / source.filename
    if target.exists() and not force:
        how, digest, problem = _verify(target, source, sha256)
        if problem is None:
            return FetchResult(target, digest, how, downloaded=False)
        raise FetchError(f"{target} exists but does not verify ({problem}); pass --force to "
                         "download it again")
    url = source_url(source, base_url)
    part = dest / f".{source.filename}.part-{os.getpid()}"
    try:
        with httpx.Client(follow_redirects=True, timeout=timeout_s,
                          trust_env=not _is_loopback(url)) as client, client.stream(
                              "GET", url) as response:
            if response.status_code >= 400:
                raise FetchError(f"GET {url}: HTTP {response.status_code} "
                                 f"{response.reason_phrase}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind in ("text/html", "application/xhtml+xml"):
                # an error or log-in page served with 200 (a proxy, a moved file): no trace
                raise FetchError(f"GET {url}: answered an HTML page (Content-Type {kind}), "
                                 "not the trace file")
            length = response.headers.get("content-length")
            total = int(length) if length and length.isdigit() else source.size
            limit = None if source.size is None or sha256 is not None else source.size
            with part.open("wb") as fh, tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1024,
                desc=source.filename, disable=not progress, file=stream or sys.stderr,
                leave=False,
            ) as bar:
                received = 0
                for chunk in response.iter_bytes(1 << 20):
                    if not received and chunk.lstrip()[:1] == b"<":  # no trace starts so
                        raise FetchError(f"GET {url}: answered an HTML or XML page, not the "
                                         "trace file")
                    received += len(chunk)
                    if limit is not None and received > limit:  # no endless download
                        raise FetchError(f"GET {url}: more than the {limit:,} bytes the "
                                         "source has; deleted")
                    fh.write(chunk)
                    bar.update(len(chunk))
        how, digest, problem = _verify(part, source, sha256)
        if problem is not None:
            raise FetchError(f"{url}: the download does not verify ({problem}); deleted")
        part.replace(target)
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    finally:
        if part.exists():
            part.unlink()
    return FetchResult(target, digest, how, downloaded=True)
