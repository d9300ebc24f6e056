"""A minimal OTLP/gRPC trace receiver that writes what it receives as OTLP JSON lines.

Used by scripts/make_recording_fixtures.sh (target ``vllm-otel``) in place of the
OpenTelemetry Collector, whose binary this machine cannot fetch (its releases are on GitHub,
not on PyPI, Debian or npm). It does what a collector with an ``otlp`` receiver and a ``file``
exporter (``format: json``) does with traces: each ``ExportTraceServiceRequest`` that arrives
is written as one line of OTLP JSON, the JSON Protobuf Encoding of the OTLP specification
(opentelemetry-proto ``docs/specification.md``): protobuf's JSON mapping
(``google.protobuf.json_format``, lowerCamelCase names, 64-bit integers as decimal strings),
with the specification's two departures from it: enums as integers and ``traceId``,
``spanId`` and ``parentSpanId`` as hex strings, not base64.

Runs in the CPU vLLM's environment, which has the official ``opentelemetry-proto`` messages
and ``grpcio`` (vLLM's tracing needs them)::

    python scripts/otlp_receiver.py --port 4317 --out traces.jsonl

Point vLLM at it with ``--otlp-traces-endpoint http://127.0.0.1:4317`` (vLLM's default OTLP
protocol is gRPC: vllm/tracing/otel.py ``get_span_exporter``). It prints the number of spans
received so far to ``OUT.count`` after each export, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-not-found]
from google.protobuf import json_format  # type: ignore[import-not-found]
from opentelemetry.proto.collector.trace.v1 import (  # type: ignore[import-not-found]
    trace_service_pb2,
    trace_service_pb2_grpc,
)

ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def hex_ids(value: Any) -> Any:
    """``value`` with every trace and span id turned from protobuf's base64 into hex."""
    if isinstance(value, dict):
        return {k: base64.b64decode(v).hex() if k in ID_FIELDS and isinstance(v, str)
                else hex_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


def otlp_json(request: Any) -> str:
    """One ExportTraceServiceRequest as one line of OTLP JSON."""
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    return json.dumps(hex_ids(doc), separators=(",", ":"))


class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """Appends each export to ``out`` as a line; counts the spans into ``out.count``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.count_file = out.with_name(out.name + ".count")
        self.num_spans = 0
        self.lock = threading.Lock()
        out.write_text("")
        self.count_file.write_text("0\n")

    def Export(self, request: Any, context: Any) -> Any:  # the gRPC method's name
        line = otlp_json(request)
        spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            with self.out.open("a") as fh:
                fh.write(line + "\n")
            self.num_spans += spans
            self.count_file.write_text(f"{self.num_spans}\n")
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceReceiver(args.out), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=2).wait()


if __name__ == "__main__":
    main()
