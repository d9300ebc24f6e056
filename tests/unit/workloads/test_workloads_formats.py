"""Each trace format on small hand-written files: known answers, options, repairs and errors."""

from __future__ import annotations

import gzip
import json
import zipfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvbudget.workloads.arrivals import ConstantArrivals
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.lengths import FactorOfTrue, FixedCap, QuantileCap
from kvbudget.workloads.synthetic import (
    Fixed,
    PoissonArrivals,
    TierTraffic,
    Uniform,
    generate_workload,
)
from kvbudget.workloads.traces import TraceOptions, detect_format, load_trace, save_workload
from kvbudget.workloads.traces.report import DROP_FAILED_OUTPUT


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
2023-11-16 18:17:05.5000000,100,3000
"""

AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,2162,5
2024-05-10 00:00:01+00:00,2399,6
2024-05-10 00:00:02.5+00:00,76,15
"""


def test_azure_2023_and_2024(tmp_path: Path) -> None:
    a = load_trace(write(tmp_path / "a.csv", AZURE_2023))
    assert a.report.format == "azure2023"
    assert np.allclose(a.workload.arrival_s, [0.0, 0.052, 1.52004])
    assert a.workload.prompt_tokens.tolist() == [4808, 3180, 100]
    # Default max_output_tokens: 2,048, never below the true output.
    assert a.workload.max_output_tokens.tolist() == [2048, 2048, 3000]
    b = load_trace(write(tmp_path / "b.csv", AZURE_2024))
    assert b.report.format == "azure2024"
    assert np.allclose(b.workload.arrival_s, [0.0, 0.99007, 2.49007])
    assert detect_format(tmp_path / "b.csv") == "azure"


# The first rows of Azure's multimodal trace (AzurePublicDataset AzureLMMInferenceDataset2025.md,
# data/AzureLMMInferenceTrace_multimodal.csv.gz, as analysis/AzureLMMInferenceDataset2025.ipynb
# at commit 517b239f shows them).
AZURE_LMM_2025 = """TIMESTAMP,NumImages,ContextTokens,GeneratedTokens
2024-10-15T12:00:00.269Z,0,770,491
2024-10-15T12:00:05.819Z,1,949,126
2024-10-15T12:00:06.513Z,1,964,79
"""


def test_azure_multimodal_says_its_images_are_not_read(tmp_path: Path) -> None:
    """Its NumImages were dropped unsaid (the prompt is ContextTokens alone); and published
    gzipped, it was refused as 'a binary file'."""
    loaded = load_trace(write(tmp_path / "mm.csv", AZURE_LMM_2025))
    assert loaded.report.format == "azure2025-multimodal"
    assert np.allclose(loaded.workload.arrival_s, [0.0, 5.55, 6.244])
    assert loaded.workload.prompt_tokens.tolist() == [770, 949, 964]
    assert loaded.report.assumed[0] == ("the file's NumImages are not read: each request's "
                                        "prompt is its ContextTokens, taken to hold its "
                                        "images' tokens")
    assert not any("NumImages" in a for a in load_trace(tmp_path / "mm.csv").report.assumed[1:])
    packed = tmp_path / "mm.csv.gz"
    packed.write_bytes(gzip.compress(AZURE_LMM_2025.encode()))
    with pytest.raises(TraceError, match=r"line 1: is gzip-compressed: decompress it first "
                       r"\(gunzip -k mm.csv.gz\)"):
        load_trace(packed)


def test_a_spreadsheet_is_named_not_called_zip_compressed(tmp_path: Path) -> None:
    """vLLM's multi-turn benchmark (benchmarks/multi_turn/benchmark_serving_multi_turn.py
    --excel-output) writes its per-request 'Raw data' sheet to an .xlsx: it was called
    'zip-compressed: decompress it first (unzip ...)', which yields XML parts, not a table."""
    book = tmp_path / "statistics_2_clients__01-01-2026_00-00-00.xlsx"
    with zipfile.ZipFile(book, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    with pytest.raises(TraceError, match=r"line 1: is a spreadsheet workbook, not a text "
                       r"trace or recording: save the sheet"):
        load_trace(book)
    plain = tmp_path / "trace.zip"  # any other zip is still a compressed file
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("trace.csv", AZURE_2024)
    with pytest.raises(TraceError, match="is zip-compressed"):
        load_trace(plain)


def test_azure_mixed_zone_offsets_are_repaired_with_warning(tmp_path: Path) -> None:
    text = AZURE_2024.replace("00:00:01+00:00", "00:00:01")
    loaded = load_trace(write(tmp_path / "m.csv", text))
    assert np.allclose(loaded.workload.arrival_s, [0.0, 0.99007, 2.49007])
    assert any("zone offset" in w for w in loaded.report.warnings)


def test_azure_bad_timestamp_names_line_and_field(tmp_path: Path) -> None:
    text = AZURE_2023.replace("2023-11-16 18:17:04.0319600", "yesterday")
    with pytest.raises(TraceError, match=r"line 3: field 'TIMESTAMP': not a timestamp"):
        load_trace(write(tmp_path / "t.csv", text))


BURST_1 = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,230,1317,Conversation log
46,GPT-4,0,0,0,Conversation log
50,GPT-4,20,30,50,API log
"""

BURST_3 = """Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
19440110.0,a,43,GPT-4,906,446,1352,Conversation log
19440161.0,b,2,ChatGPT,36,29,65,API log
19440170.0,c,2,ChatGPT,36,0,36,API log
"""


def test_burstgpt_layouts_read_by_name(tmp_path: Path) -> None:
    one = load_trace(write(tmp_path / "b1.csv", BURST_1),
                     TraceOptions(tier_column="Log Type",
                                  tier_map={"Conversation log": "interactive",
                                            "API log": "batch"}))
    assert one.report.format == "burstgpt_1"
    assert one.report.rows_read == 4 and one.report.rows_loaded == 3
    assert one.report.dropped_rows == 1
    w = one.workload
    assert w.arrival_s.tolist() == [0.0, 40.0, 45.0]
    assert [w.tier_of(i) for i in range(3)] == ["interactive", "interactive", "batch"]
    three = load_trace(write(tmp_path / "b3.csv", BURST_3))
    assert three.report.format == "burstgpt_3"
    # BurstGPT's README (HPMLL/BurstGPT e92f533b, "Data"): its failures are the rows whose
    # `Response tokens` are 0, with or without request tokens (before: counted as a mere
    # "0 output tokens" row, not as the failed request its publisher says it is)
    assert three.report.dropped == ((DROP_FAILED_OUTPUT, 1),)
    assert three.workload.prompt_tokens.tolist() == [906, 36]
    assert three.workload.arrival_s.tolist() == [0.0, 51.0]
    # before: counted in the report, said by `trace stats`, unsaid by every run (383 of 400
    # BurstGPT rows simulated with no word of the 17 failed ones)
    assert one.report.warnings == (
        "dropped 1 of the file's 4 rows, with no tokens to serve: 1 with 0 prompt and 0 output "
        "tokens (failed requests)",)
    assert three.workload.meta["warnings"] == (
        "dropped 1 of the file's 3 rows, with no tokens to serve: 1 with 0 output tokens after "
        "a prompt (failed requests, as BurstGPT's README marks them: Response tokens 0)",)
    # another format's 0-token output is no failure its publisher marked: said as it is
    generic = load_trace(write(tmp_path / "g.csv", "arrival_s,prompt_tokens,output_tokens\n"
                               "0,36,0\n1,5,5\n"))
    assert generic.report.dropped == (("0 output tokens", 1),)


def test_a_length_table_named_for_its_tokenizer_says_so(tmp_path: Path) -> None:
    # sarathi-serve's data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv and
    # Vidur's arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv name the tokenizer
    # that counted them; before, their counts became the simulated model's tokens unsaid
    text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n"
    for name in ("sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
                 "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"):
        loaded = load_trace(write(tmp_path / name, text))
        assert loaded.report.assumed[0] == (
            "token counts read as the file gives them, counted with llama2's tokenizer (its "
            "name says), not re-counted with the simulated model's")
    plain = load_trace(write(tmp_path / "lengths.csv", text))
    assert not [a for a in plain.report.assumed if "tokenizer" in a]


def test_burstgpt_says_its_rows_call_two_models(tmp_path: Path) -> None:
    # BurstGPT's README (e92f533b, "Schema"): `Model` is ChatGPT (GPT-3.5) or GPT-4; before,
    # a file of both was simulated on the one model given with no word of it
    loaded = load_trace(write(tmp_path / "b.csv", BURST_1))
    said = [a for a in loaded.report.assumed if "models" in a]
    assert said == ["the file's rows call 2 models (ChatGPT 2, GPT-4 2; its Model column): all "
                    "are simulated on the one model given (--tier-column Model makes them "
                    "tiers, on that model)"]
    assert said[0] in loaded.workload.meta["assumed"]
    one = BURST_1.replace("GPT-4", "ChatGPT")
    assert not [a for a in load_trace(write(tmp_path / "o.csv", one)).report.assumed
                if "models" in a]


def test_burstgpt_timestamps_count_from_the_first_days_midnight(tmp_path: Path) -> None:
    # BurstGPT's README (e92f533b, "Schema"): `Timestamp` is "seconds from 0:00:00 on the first
    # day": a negative one is no BurstGPT time (before: read as 50 s before the first request
    # and rebased, the row simulated first)
    text = BURST_1.replace("\n45,", "\n-45,")
    with pytest.raises(TraceError, match=r"line 3: field 'Timestamp': negative value: -45 "
                       r"\(BurstGPT's Timestamp counts seconds from 0:00:00 on its first day\)"):
        load_trace(write(tmp_path / "b.csv", text))
    # rebased to the first request, as documented: 5 s after midnight is 0
    assert load_trace(write(tmp_path / "ok.csv", BURST_1)).workload.arrival_s[0] == 0.0
    # a window counts on the file's own clock, as on every clock but a wall clock's (before:
    # from the first request, so the window 45 to 50 in the file's times selected the request
    # at 50 and not the one at 45)
    windowed = load_trace(tmp_path / "ok.csv", TraceOptions(window=(45.0, 50.0)))
    assert windowed.workload.arrival_s.tolist() == [0.0]
    assert windowed.workload.prompt_tokens.tolist() == [1087]  # the file's 45
    assert ("the window [45, 50) s counts on the file's own clock (BurstGPT's Timestamp counts "
            "seconds from 0:00:00 on its first day), where its first request is at 5 s; the "
            "window's start becomes 0") in windowed.report.assumed
    open_end = load_trace(tmp_path / "ok.csv", TraceOptions(window=(10.0, None))).workload
    assert open_end.arrival_s.tolist() == [35.0, 40.0]  # the file's 45 and 50, from 10
    assert not [a for a in load_trace(tmp_path / "ok.csv").report.assumed if "window" in a]


def test_a_negative_mooncake_timestamp_is_named_as_written(tmp_path: Path) -> None:
    # Mooncake's README (kvcache-ai/Mooncake 3b5a5941, FAST25-release/README.md): `timestamp`
    # is the relative arrival time in milliseconds; before, -5 was reported as -0.005
    text = ('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n'
            '{"timestamp": -5, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n')
    with pytest.raises(TraceError, match=r"line 2: field 'timestamp': negative value: -0.005 s "
                       r"\(-5 ms as written\)"):
        load_trace(write(tmp_path / "m.jsonl", text))


def test_burstgpt_columns_in_any_order(tmp_path: Path) -> None:
    text = """Log Type,Response tokens,Request tokens,Timestamp,Model
Conversation log,18,472,5,ChatGPT
API log,230,1087,45,GPT-4
"""
    loaded = load_trace(write(tmp_path / "r.csv", text), TraceOptions(tier_column="Model"))
    assert loaded.workload.prompt_tokens.tolist() == [472, 1087]
    assert loaded.workload.output_tokens.tolist() == [18, 230]
    assert loaded.workload.tier_names == ("ChatGPT", "GPT-4")


def test_tier_map_unmapped_values_get_default_with_warning(tmp_path: Path) -> None:
    loaded = load_trace(write(tmp_path / "b1.csv", BURST_1),
                        TraceOptions(tier_column="Model", tier_map={"GPT-4": "batch"},
                                     default_tier="interactive"))
    assert any("not in the tier map" in w for w in loaded.report.warnings)
    assert set(loaded.workload.tier_names) == {"interactive", "batch"}


def mooncake_lines(records: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_mooncake_hashes_and_buckets(tmp_path: Path) -> None:
    records = [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [0, 2]},
        {"timestamp": 0, "input_length": 10, "output_length": 7, "hash_ids": [3]},
        {"timestamp": 3000, "input_length": 513, "output_length": 8, "hash_ids": [0, 1]},
    ]
    path = write(tmp_path / "m.jsonl", mooncake_lines(records))
    w = load_trace(path).workload
    assert w.arrival_s.tolist() == [0.0, 0.0, 0.0, 3.0]
    assert w.prefix_of(1) == (0, 2) and w.prefix_of(3) == (0, 1)
    spread = load_trace(path, TraceOptions(spread_s=3.0)).workload
    assert np.allclose(spread.arrival_s, [0.0, 1.0, 2.0, 3.0])
    assert spread.prefix_of(2) == (3,)
    # A spread wider than the gap to the next timestamp is narrowed to that gap.
    narrow = load_trace(path, TraceOptions(spread_s=30.0)).workload
    assert np.allclose(narrow.arrival_s, [0.0, 1.0, 2.0, 3.0])


def test_a_coarse_clock_is_said_with_the_spread_to_give(tmp_path: Path) -> None:
    """Mooncake's conversation trace (kvcache-ai/Mooncake FAST25-release/traces/
    conversation_trace.jsonl, commit a2a4b18a) stamps requests in 3 s buckets: its first 38
    rows are at 0, 3000, 5999 and 9000 ms, up to 16 at once. Each bucket arrived as one burst,
    with no word that the clock made it; it is now said, with the --spread-s to give."""
    buckets = [(0, 10), (3000, 16), (5999, 3), (9000, 9)]
    records = [{"timestamp": t, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
               for t, k in buckets for _ in range(k)]
    path = write(tmp_path / "conversation.jsonl", mooncake_lines(records))
    said = [w for w in load_trace(path).report.warnings if "share their timestamp" in w]
    assert said == ["38 of the 38 requests share their timestamp with another (up to 16 at "
                    "once; the distinct times are 3 s apart at the median): each group arrives "
                    "at one instant; if the file's clock is that coarse, spread them "
                    "(--spread-s 3; in a scenario, [workload.options] spread_s)"]
    assert load_trace(path, TraceOptions(spread_s=3.0)).report.warnings == ()
    # A few shared times in a fine clock (BurstGPT's whole seconds: 2% of its rows) say nothing.
    fine = [{"timestamp": 1000 * i + (i % 8 == 0), "input_length": 600, "output_length": 5}
            for i in range(16)] + [{"timestamp": 16000, "input_length": 6, "output_length": 5}]
    fine[-2]["timestamp"] = 16000
    assert load_trace(write(tmp_path / "fine.jsonl", mooncake_lines(fine))).report.warnings == ()


def test_lmbench_number_timestamps_are_its_nanoseconds(tmp_path: Path) -> None:
    """LMBench's trace format takes a ``timestamp`` "string or number ... in any unit (ns, ms,
    s)" (LMCache/LMBench 3-workloads/trace-replayer/ADDING_NEW_TRACES.md, commit 18fe8926),
    and its replayer reads a number as it reads a string's digits (trace-replayer-qa.py
    ``load_trace``: ``int(t) if isinstance(t, str) else t``). gmi_trace.jsonl's first stamps
    written as numbers were read as Mooncake's ms and refused ('past the year 2100'), though
    the same stamps as strings were read."""
    stamps = [1753780607550317897, 1753780607488766527, 1753780583232023294]
    records = [{"timestamp": t, "input_length": 2101, "output_length": 84} for t in stamps]
    path = write(tmp_path / "gmi.jsonl", mooncake_lines(records))
    loaded = load_trace(path)
    assert loaded.report.format == "lmbench"
    # to the 256 ns a float holds of 1.75e18, as the replayer's own t / 1e9
    assert np.allclose(loaded.workload.arrival_s, [0.0, 24.256743233, 24.318294603],
                       rtol=0, atol=1e-6)
    assert ("timestamp numbers read in nanoseconds, as LMBench's replayer tells their unit, "
            "from the earliest") in loaded.report.assumed
    assert loaded.workload.max_output_tokens.tolist() == [84, 84, 84]  # its max_tokens
    # the same read as the generic format in ns
    columns = {"arrival_s": "timestamp", "prompt_tokens": "input_length",
               "output_tokens": "output_length"}
    with pytest.raises(TraceError, match=r"read as us .*\(as ns since 1970 .*\): "
                       r"--arrival-unit ns;"):
        load_trace(path, TraceOptions(format="generic", columns=columns, arrival_unit="us"))
    generic = load_trace(path, TraceOptions(format="generic", columns=columns,
                                            arrival_unit="ns"))
    assert np.allclose(generic.workload.arrival_s, loaded.workload.arrival_s, atol=1e-6)


def test_number_timestamps_of_two_units_are_refused(tmp_path: Path) -> None:
    """Numbers LMBench's replayer would read each in its own unit (ns above 1e15, else ms)
    are refused saying what Mooncake and LMBench expect and what the file holds, as strings
    of two units are."""
    stamps = [1753780607550317897, 1753780607488766527, 1753780607, 1753780608, 1753780609]
    records = [{"timestamp": t, "input_length": 2101, "output_length": 84} for t in stamps]
    with pytest.raises(TraceError, match=r"line 1: field 'timestamp': the timestamps mix "
                       r"nanoseconds \(above 1e15\) and milliseconds: Mooncake's are ms from "
                       r"the trace's start, LMBench's one unit"):
        load_trace(write(tmp_path / "mixed.jsonl", mooncake_lines(records)))
    # Unix-epoch microseconds, which the replayer's fallback would read as ns, 1,000 times too
    # fast: refused naming the unit they are in, not read
    us = [{"timestamp": t // 1000, "input_length": 2101, "output_length": 84}
          for t in stamps[:2]]
    with pytest.raises(TraceError, match=r"line 2: field 'timestamp': the times read as ms "
                       r"put the first request 1.754e\+12 s after 1970-01-01, past the year "
                       r"2100: they are in a finer unit \(as us since 1970 they fall on "
                       r"2025-07-29T09:16:47Z\)"):
        load_trace(write(tmp_path / "us.jsonl", mooncake_lines(us)))


def test_lmbench_string_timestamps_are_its_nanoseconds(tmp_path: Path) -> None:
    """LMCache/LMBench 3-workloads/trace-replayer/traces/gmi_trace.jsonl (commit 48172cd1)
    writes its timestamps as strings of Unix-epoch nanoseconds, newest first, with more
    hash_ids than Mooncake's 512-token blocks allow (58 for 2,101 tokens); its replayer,
    trace-replayer-qa.py, reads them as ``int(...)`` and replays ``(t - earliest) / 1e9``
    seconds. kvbudget refused the file ('not a number'), as Mooncake and as the generic
    format. These are its three first stamps, with small lengths and hashes."""
    stamps = ["1753780607550317897", "1753780607488766527", "1753780583232023294"]
    records = [{"timestamp": t, "input_length": 64 + k, "output_length": 8 + k,
                "hash_ids": list(range(10 * k, 10 * k + 9))} for k, t in enumerate(stamps)]
    path = write(tmp_path / "gmi_trace.jsonl", mooncake_lines(records))
    assert detect_format(path) == "mooncake"
    loaded = load_trace(path)
    assert loaded.report.format == "lmbench"
    # nanoseconds taken apart in integers: 24.256743233 s, then 0.06155137 s more
    assert loaded.workload.arrival_s.tolist() == [0.0, 24.256743233, 24.318294603]
    assert loaded.workload.prompt_tokens.tolist() == [66, 65, 64]
    assert loaded.workload.prefix_hashes is None
    # its replayer sends output_length as max_tokens (trace-replayer-qa.py, commit 18fe8926,
    # send_request lines 235-257, called with entry['output_length'] at 359-362 and 469-472):
    # read from the file, not the default 2,048, and not said to be assumed
    assert loaded.workload.max_output_tokens.tolist() == [10, 9, 8]
    assert not any("no max_tokens" in a for a in loaded.report.assumed)
    # and, with no ignore_eos, its answers could stop sooner: the lengths are said to be taken
    assert any(a.startswith("output_length read as each answer's length") and "ignore_eos" in a
               for a in loaded.report.assumed)
    said = [w for w in loaded.report.warnings if w.startswith("hash_ids not read")]
    assert said and "give prefix_block_tokens" in said[0]
    # with the size of a hash's block given, the hashes are read
    given = load_trace(path, TraceOptions(prefix_block_tokens=7))
    assert given.workload.prefix_hashes is not None
    assert not any(w.startswith("hash_ids not read") for w in given.report.warnings)
    assert ("timestamp strings read in nanoseconds, as LMBench's replayer tells their unit, "
            "from the earliest") in loaded.report.assumed
    # a string that is no whole number is refused
    bad = [*records[:2], {**records[2], "timestamp": "2025-07-29T09:16:23Z"}]
    with pytest.raises(TraceError, match=r"line 3: field 'timestamp': not a whole number: "
                       r"'2025-07-29T09:16:23Z'"):
        load_trace(write(tmp_path / "bad.jsonl", mooncake_lines(bad)))


@pytest.mark.parametrize(("stamps", "seconds", "unit"), [
    # "synthetic offsets": all below 1e12, read as ms from the start
    (["0", "1000", "2500"], [0.0, 1.0, 2.5], "milliseconds"),
    # Unix-epoch milliseconds (1.6e12 to 2e12)
    (["1753780607550", "1753780608050", "1753780583232"], [0.0, 24.318, 24.818], "milliseconds"),
    # Unix-epoch nanoseconds
    (["1753780607550317897", "1753780583232023294"], [0.0, 24.318294603], "nanoseconds"),
])
def test_lmbench_string_timestamps_in_the_unit_its_replayer_tells(
        tmp_path: Path, stamps: list[str], seconds: list[float], unit: str) -> None:
    """LMCache/LMBench trace-replayer-qa.py since commit ecb11e6 (at 18fe8926,
    ``detect_timestamp_format``, ``convert_timestamp_to_seconds``) reads string or integer
    timestamps as Unix-epoch ns or ms, or, all below 1e12, as ms from the start; kvbudget read
    every string as ns and refused the others ('is no date between 1972 and 2100'), so a file
    that replayer reads was not read."""
    records = [{"timestamp": t, "input_length": 64, "output_length": 8} for t in stamps]
    loaded = load_trace(write(tmp_path / "t.jsonl", mooncake_lines(records)))
    assert loaded.report.format == "lmbench"
    assert np.allclose(loaded.workload.arrival_s, seconds, rtol=0, atol=1e-9)
    assert (f"timestamp strings read in {unit}, as LMBench's replayer tells their unit, from "
            "the earliest") in loaded.report.assumed


def test_lmbench_string_timestamps_of_two_units_are_refused(tmp_path: Path) -> None:
    """Times the replayer would read each in its own unit (ns above 1e15, else ms: its
    "unknown" format) are refused, not read half in each."""
    stamps = ["1000000000000000000", "1100000000000000000", "5000000000000", "6000000000000",
              "7000000000000"]
    records = [{"timestamp": t, "input_length": 64, "output_length": 8} for t in stamps]
    with pytest.raises(TraceError, match=r"line 2: field 'timestamp': the string timestamps "
                       r"mix nanoseconds"):
        load_trace(write(tmp_path / "t.jsonl", mooncake_lines(records)))


def test_epoch_seconds_read_as_milliseconds_are_refused(tmp_path: Path) -> None:
    """The same LMBench requests with Unix-epoch seconds in Mooncake's timestamp: read as ms,
    five requests 12.9 s apart arrived 20 days in, within 13 ms (309 req/s), exit 0."""
    stamps = [1753780226.631, 1753780227.393, 1753780235.105, 1753780237.618, 1753780239.566]
    records = [{"timestamp": t, "input_length": 500, "output_length": 50} for t in stamps]
    path = write(tmp_path / "epoch_s.jsonl", mooncake_lines(records))
    with pytest.raises(TraceError, match=r"line 1: field 'timestamp': the times read as ms put "
                       r"the first request 20.3 days in and the last 0.0129 s after it: as s "
                       r"since 1970 they fall on 2025-07-29T09:10:26Z: write them in ms from "
                       r"the trace's start, or read the file as the generic format"):
        load_trace(path)
    columns = {"arrival_s": "timestamp", "prompt_tokens": "input_length",
               "output_tokens": "output_length"}
    with pytest.raises(TraceError, match=r"as s since 1970 .*: --arrival-unit s;"):
        load_trace(path, TraceOptions(format="generic", columns=columns, arrival_unit="ms"))
    loaded = load_trace(path, TraceOptions(format="generic", columns=columns))
    assert np.allclose(loaded.workload.arrival_s, np.array(stamps) - stamps[0])
    # A trace that starts late on its own clock, over a span to match, is read as it is.
    late = [{"timestamp": 86_400_000 * 30 + 3_600_000 * i, "input_length": 5, "output_length": 5}
            for i in range(3)]
    assert len(load_trace(write(tmp_path / "late.jsonl", mooncake_lines(late))).workload) == 3


# splitwise-sim's traces (Mutinifni/splitwise-sim traces/test_trace.csv at commit 37808801,
# written by its generate_trace.py): its header, with small made-up rows.
SPLITWISE = """request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size
0,2,0,1,1,40,3
1,2,0,3.25,1,20,8
2,2,1,4,1,20,16
"""


def test_splitwise_sim_trace_is_read(tmp_path: Path) -> None:
    """It got 'cannot tell the trace format from the header'."""
    path = write(tmp_path / "rr_conv_50.csv", SPLITWISE)
    assert detect_format(path) == "splitwise"
    loaded = load_trace(path)
    assert loaded.report.format == "splitwise"
    assert loaded.workload.arrival_s.tolist() == [1.0, 3.25, 4.0]  # seconds, as written
    assert loaded.workload.prompt_tokens.tolist() == [40, 20, 20]
    assert loaded.workload.output_tokens.tolist() == [3, 8, 16]
    by_app = load_trace(path, TraceOptions(tier_column="application_id",
                                           tier_map={"0": "interactive", "1": "batch"}))
    assert [by_app.workload.tier_names[t] for t in by_app.workload.tier.tolist()] == [
        "interactive", "interactive", "batch"]
    # several sequences a request, or a request type splitwise-sim does not serve: refused
    for column, value, message in ((4, "2", "batch_size': 2: splitwise-sim's requests have "
                                    "batch_size 1"),
                                   (1, "0", "request_type': 0: splitwise-sim's requests have "
                                    "request_type 2")):
        rows = [line.split(",") for line in SPLITWISE.splitlines()]
        rows[3][column] = value
        bad = write(tmp_path / "bad.csv", "\n".join(",".join(r) for r in rows) + "\n")
        with pytest.raises(TraceError, match=f"line 4: field '{message}"):
            load_trace(bad)


def test_length_table_with_arrival_process(tmp_path: Path) -> None:
    text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n10,5,15,2\n20,6,26,3\n"
    path = write(tmp_path / "l.csv", text)
    default = load_trace(path)
    assert not default.report.timed
    assert any("no arrival times" in w for w in default.report.warnings)
    fixed = load_trace(path, TraceOptions(arrival=ConstantArrivals(2.0)))
    assert fixed.workload.arrival_s.tolist() == [0.5, 1.0]
    assert fixed.workload.prompt_tokens.tolist() == [10, 20]
    assert fixed.report.warnings == ()


# The first rows of Vidur's processed Splitwise conversation trace (microsoft/vidur
# data/processed_traces/splitwise_conv.csv, commit 8e54dd5c): a length table with the arrival.
VIDUR_SPLITWISE = """arrived_at,num_prefill_tokens,num_decode_tokens
0.0,374,44
4.314579,396,109
4.541877,879,55
5.8926549999999995,91,16
"""


def test_vidur_length_table_keeps_its_arrival_times(tmp_path: Path) -> None:
    """Its arrived_at was dropped: Poisson arrivals at 1 req/s were drawn in its place, with a
    warning that the file had none."""
    path = write(tmp_path / "splitwise_conv.csv", VIDUR_SPLITWISE)
    assert detect_format(path) == "lengths"
    loaded = load_trace(path)
    assert loaded.report.timed and loaded.report.format == "vidur"
    assert loaded.workload.arrival_s.tolist() == [0.0, 4.314579, 4.541877, 5.8926549999999995]
    assert loaded.workload.prompt_tokens.tolist() == [374, 396, 879, 91]
    assert not any("arrival" in w for w in loaded.report.warnings)
    with pytest.raises(TraceError, match="line 3: field 'arrived_at'"):
        load_trace(write(tmp_path / "bad.csv", VIDUR_SPLITWISE.replace("4.314579", "x")))
    with pytest.raises(TraceError, match="arrival"):
        load_trace(path, TraceOptions(arrival=ConstantArrivals(2.0)))


def test_a_generic_file_with_an_unmapped_time_column_is_refused(tmp_path: Path) -> None:
    """BLIS's traces.csv (inference-sim/inference-sim, commit 9164a822: arrived_at,
    prefill_tokens, decode_tokens) mapped for its lengths only, or a log with a 'timestamp'
    beside prompt_tokens and output_tokens, had Poisson arrivals at 1 req/s drawn in place of
    its own times (a warning that the file had none; exit 0)."""
    text = "arrived_at,prefill_tokens,decode_tokens\n0,5047,514\n0.565865,4958,378\n"
    path = write(tmp_path / "traces.csv", text)
    lengths = {"prompt_tokens": "prefill_tokens", "output_tokens": "decode_tokens"}
    with pytest.raises(TraceError, match=r"field 'arrival_s': has no arrival_s column but "
                       r"'arrived_at' looks like the arrival time: map it \(--column "
                       r"arrival_s=arrived_at"):
        load_trace(path, TraceOptions(format="generic", columns=lengths))
    mapped = load_trace(path, TraceOptions(columns={**lengths, "arrival_s": "arrived_at"}))
    assert mapped.workload.arrival_s.tolist() == [0.0, 0.565865]
    drawn = load_trace(path, TraceOptions(format="generic", columns=lengths,
                                          arrival=ConstantArrivals(2.0)))
    assert drawn.workload.arrival_s.tolist() == [0.5, 1.0]
    log = [{"timestamp": 1700000000.5, "prompt_tokens": 10, "output_tokens": 5}]
    for name in ("log.jsonl", "log.parquet"):
        target = tmp_path / name
        if name.endswith(".parquet"):
            pq.write_table(pa.Table.from_pylist(log), target)
        else:
            write(target, "".join(json.dumps(r) + "\n" for r in log))
        with pytest.raises(TraceError, match="'timestamp' looks like the arrival time"):
            load_trace(target)


def test_a_json_array_is_named_not_called_a_header(tmp_path: Path) -> None:
    """ShareGPT's conversations file (ShareGPT_V3_unfiltered_cleaned_split.json, which vLLM's
    benchmark reads) is one JSON array: it was 'cannot tell the trace format from the header
    '['; pass a format', though no format reads it."""
    text = '[\n  {\n    "id": "QWJhYvA_0",\n    "conversations": [{"from": "human", "value": "hi"}]\n  }\n]\n'
    with pytest.raises(TraceError, match=r"line 1: is a JSON array, not a trace: .*ShareGPT's"):
        load_trace(write(tmp_path / "sharegpt.json", text))


def test_generic_formats_round_trip(tmp_path: Path) -> None:
    tiers = [TierTraffic("interactive", 0.6, Uniform(1, 100), Uniform(1, 50),
                         max_output=FixedCap(40)),
             TierTraffic("batch", 0.4, Fixed(7), Uniform(10, 20), max_output=FactorOfTrue(2))]
    original = generate_workload(PoissonArrivals(3.0), tiers, np.random.default_rng(5),
                                 num_requests=200)
    deadline = original.deadline_s.copy()
    deadline[::3] = original.arrival_s[::3] + 5.0
    original = type(original)(**{**original.__dict__, "deadline_s": deadline})
    for suffix in (".csv", ".jsonl", ".parquet"):
        path = save_workload(original, tmp_path / f"w{suffix}")
        loaded = load_trace(path)
        w = loaded.workload
        assert loaded.report.format == f"generic-{suffix[1:]}"
        for col in ("arrival_s", "prompt_tokens", "output_tokens", "max_output_tokens",
                    "request_id"):
            assert np.array_equal(getattr(w, col), getattr(original, col)), (suffix, col)
        assert np.array_equal(w.deadline_s, original.deadline_s, equal_nan=True)
        assert [w.tier_of(i) for i in range(len(w))] == [
            original.tier_of(i) for i in range(len(original))]


def test_generic_round_trip_keeps_prefix_hashes(tmp_path: Path) -> None:
    records = [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 10, "input_length": 10, "output_length": 6, "hash_ids": []},
        {"timestamp": 20, "input_length": 600, "output_length": 7, "hash_ids": [0, 9]},
    ]
    original = load_trace(write(tmp_path / "m.jsonl", mooncake_lines(records))).workload
    for suffix in (".csv", ".jsonl", ".parquet"):
        w = load_trace(save_workload(original, tmp_path / f"p{suffix}")).workload
        assert [w.prefix_of(i) for i in range(3)] == [(0, 1), (), (0, 9)], suffix


def test_more_prefix_hashes_than_blocks_are_refused(tmp_path: Path) -> None:
    # 64 hashes of 16-token blocks for a 1,024-token prompt: read as 512-token blocks, the
    # shared prefix was counted over and the run answered, exit 0; ceil(1024 / 512) = 2
    hashes = list(range(64))
    text = "".join(json.dumps({"arrival_s": t, "prompt_tokens": 1024, "output_tokens": 5,
                               "hash_ids": hashes}) + "\n" for t in (0, 1))
    path = write(tmp_path / "h.jsonl", text)
    with pytest.raises(TraceError, match=r"line 1: field 'hash_ids': 64 hashes for 1024 "
                                         r"prompt tokens: .* 512 tokens .* at most 2 "):
        load_trace(path)
    w = load_trace(path, TraceOptions(prefix_block_tokens=16)).workload
    assert w.prefix_block_tokens == 16 and w.prefix_of(1) == tuple(hashes)


def test_a_parquet_trace_keeps_its_prefix_block_size(tmp_path: Path) -> None:
    # a hashed trace of 16-token blocks saved by kvbudget and loaded again came back with
    # Mooncake's 512 (its metadata was never read): every prefix hit counted 32 times over
    hashes = list(range(64))
    text = "".join(json.dumps({"arrival_s": t, "prompt_tokens": 1024, "output_tokens": 5,
                               "hash_ids": hashes}) + "\n" for t in (0, 1))
    w = load_trace(write(tmp_path / "h.jsonl", text),
                   TraceOptions(prefix_block_tokens=16)).workload
    saved = save_workload(w, tmp_path / "h.parquet")
    back = load_trace(saved).workload
    assert back.prefix_block_tokens == 16 and back.prefix_of(1) == tuple(hashes)
    assert load_trace(saved, TraceOptions(prefix_block_tokens=16)).workload.prefix_of(0)
    with pytest.raises(TraceError, match=r"field 'prefix_block_tokens': its hash_ids name "
                                         r"blocks of 16 tokens .* prefix_block_tokens 512 was"):
        load_trace(saved, TraceOptions(prefix_block_tokens=512))
    # a trace without hashes takes whatever size is given
    plain = save_workload(replace(w, prefix_hashes=None, prefix_offsets=None),
                          tmp_path / "plain.parquet")
    assert load_trace(plain, TraceOptions(prefix_block_tokens=512)).workload.prefix_block_tokens \
        == 512


def test_a_runs_records_are_not_read_as_a_trace(tmp_path: Path) -> None:
    # before: a simulate --out requests.parquet given as a trace was read as one: its refused
    # requests' output_tokens (0) dropped and the partial answers of dropped ones taken as
    # their true lengths, exit 0
    from kvbudget.policies import make_policy
    from kvbudget.simulator.run import SimConfig, simulate

    w = generate_workload(PoissonArrivals(2.0), [TierTraffic(
        "interactive", 1.0, Uniform(10, 50), Uniform(1, 20))], np.random.default_rng(1),
        num_requests=20)
    out = tmp_path / "run"
    simulate(w, make_policy("unlimited"), SimConfig()).write(out)
    path = out / "requests.parquet"
    with pytest.raises(TraceError, match=r"is a run's records .*not a trace"):
        load_trace(path)
    # a recording's reader names the format: read as the generic format it is
    assert len(load_trace(path, TraceOptions(format="generic")).workload) == 20


def test_generic_column_mapping_and_units(tmp_path: Path) -> None:
    text = "t_ms,in,out,who\n1500,10,2,gold\n500,20,3,free\n"
    path = write(tmp_path / "g.csv", text)
    loaded = load_trace(path, TraceOptions(
        format="generic", columns={"arrival_s": "t_ms", "prompt_tokens": "in",
                                   "output_tokens": "out", "tier": "who"},
        arrival_unit="ms", tier_map={"gold": "interactive", "free": "batch"}))
    w = loaded.workload
    assert w.arrival_s.tolist() == [0.5, 1.5]
    assert [w.tier_of(i) for i in range(2)] == ["batch", "interactive"]
    assert any("not in order" in m for m in loaded.report.warnings)


def test_generic_parquet_with_string_numbers_and_bad_value(tmp_path: Path) -> None:
    table = pa.table({"arrival_s": ["0.5", "1.0"], "prompt_tokens": [3, 4],
                      "output_tokens": [1, 2]})
    pq.write_table(table, tmp_path / "s.parquet")
    assert load_trace(tmp_path / "s.parquet").workload.arrival_s.tolist() == [0.5, 1.0]
    bad = pa.table({"arrival_s": [0.5, 1.0], "prompt_tokens": ["3", "x"],
                    "output_tokens": [1, 2]})
    pq.write_table(bad, tmp_path / "b.parquet")
    with pytest.raises(TraceError, match=r"row 1: field 'prompt_tokens': not a number"):
        load_trace(tmp_path / "b.parquet")


def test_window_rate_scale_and_sampling(tmp_path: Path) -> None:
    rows = "".join(f"{t},{10 + t},{1 + t % 5}\n" for t in range(100))
    path = write(tmp_path / "g.csv", "arrival_s,prompt_tokens,output_tokens\n" + rows)
    w = load_trace(path, TraceOptions(window=(10, 20))).workload
    assert w.arrival_s.tolist() == [float(t) for t in range(10)]
    assert w.prompt_tokens.tolist() == [10 + t for t in range(10, 20)]
    fast = load_trace(path, TraceOptions(window=(10, None), rate_scale=2.0)).workload
    assert fast.arrival_s[-1] == 44.5 and len(fast) == 90
    sample = load_trace(path, TraceOptions(sample_count=30, seed=3)).workload
    again = load_trace(path, TraceOptions(sample_count=30, seed=3)).workload
    assert len(sample) == 30 and np.array_equal(sample.request_id, again.request_id)
    assert np.all(np.diff(sample.arrival_s) >= 0)
    assert len(load_trace(path, TraceOptions(sample_fraction=0.25)).workload) == 25
    with pytest.raises(TraceError, match="window"):
        load_trace(path, TraceOptions(window=(500, 600)))
    with pytest.raises(TraceError, match="sample_count"):
        load_trace(path, TraceOptions(sample_count=1000))


def test_tier_shares_and_max_output_rules(tmp_path: Path) -> None:
    rows = "".join(f"{t},{10},{1 + t}\n" for t in range(1000))
    path = write(tmp_path / "g.csv", "arrival_s,prompt_tokens,output_tokens\n" + rows)
    w = load_trace(path, TraceOptions(tier_shares={"interactive": 0.7, "batch": 0.3},
                                      seed=1)).workload
    share = float((w.tier == w.tier_names.index("interactive")).mean())
    assert abs(share - 0.7) < 0.06
    q = load_trace(path, TraceOptions(max_output=QuantileCap(0.9))).workload
    assert q.max_output_tokens.tolist() == [max(900, o) for o in range(1, 1001)]
    t = load_trace(path, TraceOptions(max_output=FixedCap(100, truncate=True))).workload
    assert t.output_tokens.max() == 100 and t.max_output_tokens.tolist() == [100] * 1000
    by_tier = load_trace(path, TraceOptions(
        tier_shares={"interactive": 0.5, "batch": 0.5},
        max_output_by_tier={"batch": FactorOfTrue(1.0)})).workload
    batch = by_tier.tier == by_tier.tier_names.index("batch")
    assert np.array_equal(by_tier.max_output_tokens[batch], by_tier.output_tokens[batch])
    assert np.all(by_tier.max_output_tokens[~batch] >= 2048)
    # what each rule declared is said with the load (tier shares were given: no tier assumed)
    said = load_trace(path, TraceOptions(
        tier_shares={"interactive": 0.5, "batch": 0.5},
        max_output_by_tier={"batch": FactorOfTrue(1.0)})).report.assumed
    assert len(said) == 1 and said[0].startswith("no max_tokens read from the file: max_output_tokens ")
    assert "interactive: 2,048 (or the true output where longer)" in said[0]
    assert "batch: 1x the true output" in said[0]
    said = load_trace(path, TraceOptions(max_output=QuantileCap(0.9, truncate=True))).report
    assert said.assumed[1].startswith("no max_tokens read from the file: max_output_tokens the "
                                      "outputs' 0.9 quantile (longer outputs cut to it)")


def test_generic_max_output_column_used_where_given(tmp_path: Path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens,max_output_tokens,deadline_s\n0,5,3,4,\n1,5,3,,9\n"
    w = load_trace(write(tmp_path / "g.csv", text)).workload
    assert w.max_output_tokens.tolist() == [4, 2048]
    assert np.isnan(w.deadline_s[0]) and w.deadline_s[1] == 9.0
    bad = text.replace("0,5,3,4,", "0,5,3,2,")
    with pytest.raises(TraceError, match=r"line 2: field 'max_output_tokens': 2 is below"):
        load_trace(write(tmp_path / "b.csv", bad))


# ---------------------------------------------------------------------------------------------
# Repairs


def test_unsorted_timestamps_are_sorted_with_warning(tmp_path: Path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens\n0,1,1\n5,2,2\n3,3,3\n4,4,4\n"
    loaded = load_trace(write(tmp_path / "u.csv", text))
    assert loaded.workload.arrival_s.tolist() == [0, 3, 4, 5]
    assert loaded.workload.request_id.tolist() == [0, 2, 3, 1]
    (warning,) = loaded.report.warnings
    assert "line 4" in warning and "3 rows" in warning


def test_truncated_last_line_is_dropped(tmp_path: Path) -> None:
    for text in (AZURE_2023 + "2023-11-16 18:17:06.00", AZURE_2023 + "2023-11-16 18:17:06,12",
                 AZURE_2023 + "2023-11-16 18:17:06,12,"):
        loaded = load_trace(write(tmp_path / "t.csv", text))
        assert loaded.report.rows_loaded == 3
        assert loaded.report.dropped == (("truncated last line", 1),)
        assert any("truncated" in w for w in loaded.report.warnings)
    records = mooncake_lines([{"timestamp": 0, "input_length": 5, "output_length": 1}] * 2)
    loaded = load_trace(write(tmp_path / "t.jsonl", records + '{"timestamp": 1, "input_le'))
    assert loaded.report.rows_loaded == 2 and loaded.report.dropped_rows == 1


def test_bad_last_line_with_newline_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"line 5: expected 3 fields, got 2"):
        load_trace(write(tmp_path / "t.csv", AZURE_2023 + "2023-11-16 18:17:06,12\n"))


# ---------------------------------------------------------------------------------------------
# Errors: one line naming the file, the line and the field


@pytest.mark.parametrize(("name", "text", "said"), [
    # a misspelt column: the header's closest name
    ("t.csv", "arrival_s,prompt_tokns,output_tokens\n0,1,1\n1,2,1\n",
     "line 1: field 'prompt_tokens': missing column 'prompt_tokens' needed by the generic format "
     "(the header has: arrival_s, prompt_tokns, output_tokens): if a column holds it, map it "
     "(--column prompt_tokens=prompt_tokns; in a scenario, [workload.options] columns)"),
    # the OpenAI API's name for it
    ("t.csv", "arrival_s,prompt_tokens,completion_tokens\n0,1,1\n1,2,1\n",
     "--column output_tokens=completion_tokens;"),
    # nothing close: the form of the flag
    ("t.csv", "arrival_s,tok_a,tok_b\n0,1,1\n1,2,1\n", "--column prompt_tokens=COLUMN;"),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 3, "output_tokens": 1}\n',
     "(the first line has: arrival_s, input_tokens, output_tokens): if a column holds it, map it "
     "(--column prompt_tokens=input_tokens;"),
])
def test_a_missing_generic_column_says_how_to_map_the_one_that_holds_it(
        tmp_path: Path, name: str, text: str, said: str) -> None:
    """A generic file whose prompt column was misspelt (``prompt_tokns``) or named as a tool
    names it was refused "missing column 'prompt_tokens' ... (the header has: ...)": not what
    to do, where a file without ``arrival_s`` is told ``--column arrival_s=...``. The refusal
    now says it, with the column that likely holds the field; following it loads the file."""
    path = write(tmp_path / name, text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert said in str(info.value), str(info.value)
    flag = str(info.value).split("(--column ")[1].split(";")[0]
    field, column = flag.split("=")
    if column != "COLUMN":
        loaded = load_trace(path, TraceOptions(columns={field: column}))
        assert len(loaded.workload) >= 1


@pytest.mark.parametrize(("text", "hinted"), [
    # a table of counts a row, no send time (vllm_bench's engines.csv has these columns): a
    # load tool's output more likely than a trace, so the way to recordings is said
    ("engine,requests,prompt_tokens,generation_tokens,requests_per_sec\nleader-1,8,48,128,5.8\n",
     True),
    # a trace with its send times and a column to map: only the mapping is said
    ("arrival_s,prompt_tokens,completion_tokens\n0,1,1\n", False),
    ("ts,prompt_tokens\n0,1\n", True),
])
def test_a_generic_file_without_send_times_missing_a_count_names_the_recordings_way(
        tmp_path: Path, text: str, hinted: bool) -> None:
    """vllm_bench's engines.csv given to simulate --trace was read as a generic trace (its
    prompt_tokens column) and told only to map output_tokens, no word of validate --records,
    which names it; ``--column arrival_s=ts`` counts as a send-time column."""
    path = write(tmp_path / "t.csv", text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    said = str(info.value)
    assert "missing column 'output_tokens'" in said and "\n" not in said
    assert ("kvbudget validate --records FILE" in said) is hinted
    if hinted and text.startswith("ts,"):
        with pytest.raises(TraceError) as info:
            load_trace(path, TraceOptions(columns={"arrival_s": "ts"}))
        assert "kvbudget validate --records" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("arrival_s,prompt_tokens\n0,1\n", r"line 1: field 'output_tokens': missing column"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,abc,1\n2,1,1\n",
         r"line 3: field 'prompt_tokens': not a number: 'abc'"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,-5,1\n2,1,1\n",
         r"line 3: field 'prompt_tokens': negative value: -5"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,2,NaN\n2,1,1\n",
         r"line 3: field 'output_tokens': missing value"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,2,1.5\n2,1,1\n",
         r"line 3: field 'output_tokens': not a whole number: 1.5"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n\n-1,2,1\n",
         r"line 4: field 'arrival_s': negative value"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\ninf,2,1\n3,1,1\n",
         r"line 3: field 'arrival_s': not finite"),
        ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,2,1,7\n3,1,1\n",
         r"line 3: expected 3 fields, got 4"),
        ("id,arrival_s,prompt_tokens,output_tokens\n1,0,1,1\n1,1,2,1\n",
         r"line 3: field 'id': duplicate id 1 \(first at line 2\)"),
        ("arrival_s,prompt_tokens,output_tokens\n", r"has no data rows"),
        ("", r"is empty"),
        ("\n\n", r"is empty"),
        ("a,b,c\n1,2,3\n", r"line 1: cannot tell the trace format"),
        ("arrival_s,prompt_tokens,output_tokens\n0,0,0\n", r"no requests left"),
        ("arrival_s,prompt_tokens,output_tokens,deadline_s\n5,1,1,4\n",
         r"line 2: field 'deadline_s': 4 is before arrival_s 5"),
    ],
)
def test_bad_input_errors(tmp_path: Path, text: str, pattern: str) -> None:
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(TraceError, match=pattern) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('{"timestamp": 0, "input_length": 1}\n', r"line 1: field 'output_length': missing"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n[1]\n'
         '{"timestamp": 0, "input_length": 1, "output_length": 1}\n',
         r"line 2: not a JSON object"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"timestamp": 1, '
         '"input_length": "x", "output_length": 1}\n{"timestamp": 0, "input_length": 1, '
         '"output_length": 1}\n', r"line 2: field 'input_length': not a number: 'x'"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"timestamp": 1, '
         '"input_length": 2, "output_length": 1, "hash_ids": [1, "a"]}\n{"timestamp": 0, '
         '"input_length": 1, "output_length": 1}\n',
         r"line 2: field 'hash_ids': expected a list of integers"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n{bad json}\n'
         '{"timestamp": 0, "input_length": 1, "output_length": 1}\n', r"line 2: not valid JSON"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n\n{"timestamp": 1, '
         '"input_length": null, "output_length": 1}\n{"timestamp": 2, "input_length": 1, '
         '"output_length": 1}\n', r"line 3: field 'input_length': missing value"),
    ],
)
def test_bad_jsonl_errors(tmp_path: Path, text: str, pattern: str) -> None:
    path = write(tmp_path / "bad.jsonl", text)
    with pytest.raises(TraceError, match=pattern):
        load_trace(path, TraceOptions(format="mooncake"))


def test_wrong_format_names_the_missing_column_and_suggests(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", AZURE_2023)
    with pytest.raises(TraceError, match=r"field 'Timestamp'.*looks like azure, not "
                       r"burstgpt"):
        load_trace(path, TraceOptions(format="burstgpt"))
    with pytest.raises(TraceError, match=r"line 1: not valid JSON"):
        load_trace(path, TraceOptions(format="mooncake"))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="ServeGen"):
        load_trace(tmp_path)


def test_bad_option_values() -> None:
    from kvbudget.workloads.errors import SpecError

    with pytest.raises(SpecError, match="rate_scale must be > 0, got 0"):
        TraceOptions(rate_scale=0)
    with pytest.raises(SpecError, match="format must be one of"):
        TraceOptions(format="csv")
    with pytest.raises(SpecError, match="tier_shares must sum to 1"):
        TraceOptions(tier_shares={"a": 0.5})
    with pytest.raises(SpecError, match="window end_s must be > start_s"):
        TraceOptions(window=(5, 1))


# ---------------------------------------------------------------------------------------------
# ServeGen on a hand-made chunk


def _servegen_chunk(folder: Path, cid: int, rows: str, dataset: Mapping[str, object]) -> None:
    write(folder / f"chunk-{cid}-trace.csv", rows)
    write(folder / f"chunk-{cid}-dataset.json", json.dumps(dataset))


def test_servegen_small_chunk(tmp_path: Path) -> None:
    rows = "0,10,1.0,Gamma,1.0,0.1\n600,0,0,,0,0\n1200,5,2.0,Weibull,0.6,0.1\n"
    dataset = {"0": {"input_tokens": "{100: 0.5, 200: 0.5}", "output_tokens": "{7: 1.0}"}}
    _servegen_chunk(tmp_path, 7, rows, dataset)
    w = load_trace(tmp_path / "chunk-7-trace.csv", TraceOptions(window=(0, 1800))).workload
    assert set(w.prompt_tokens.tolist()) <= {100, 200} and set(w.output_tokens.tolist()) == {7}
    in_first = int((w.arrival_s < 600).sum())
    in_quiet = int(((w.arrival_s >= 600) & (w.arrival_s < 1200)).sum())
    assert in_quiet == 0 and abs(in_first - 6000) < 6 * np.sqrt(6000)
    assert w.tier_names == ("client-7",)


def test_servegen_says_its_lengths_are_drawn_independently(tmp_path: Path) -> None:
    """The data hold each length's distribution, not their joint: the load says how it pairs
    them, and the pairing is independent (a long prompt is not tied to a long output)."""
    dataset = {"0": {"input_tokens": "{10: 0.5, 1000: 0.5}", "output_tokens": "{1: 0.5, 900: 0.5}"}}
    _servegen_chunk(tmp_path, 4, "0,20,1.0,Gamma,1.0,0.05\n", dataset)
    loaded = load_trace(tmp_path / "chunk-4-trace.csv", TraceOptions(window=(0, 600)))
    assert any("drawn independently" in a for a in loaded.report.assumed)
    w = loaded.workload
    long_prompt = w.prompt_tokens == 1000
    # comonotone pairing would give every 1,000-token prompt a 900-token output
    assert 0.35 < float(np.mean(w.output_tokens[long_prompt] == 900)) < 0.65


def test_a_servegen_window_past_the_data_says_how_much_has_none(tmp_path: Path) -> None:
    """A window reaching past the data returned only the part inside, unsaid."""
    rows = "0,10,1.0,Gamma,1.0,0.1\n600,0,0,,0,0\n1200,5,2.0,Weibull,0.6,0.1\n"  # 0 to 1800 s
    dataset = {"0": {"input_tokens": "{100: 1.0}", "output_tokens": "{7: 1.0}"}}
    _servegen_chunk(tmp_path, 7, rows, dataset)
    path = tmp_path / "chunk-7-trace.csv"

    def past(window: tuple[float, float | None]) -> list[str]:
        return [w for w in load_trace(path, TraceOptions(window=window)).report.warnings
                if "reaches past the data" in w]

    assert past((1200, 3000)) == ["the window [1200, 3000) s reaches past the data (it covers "
                                  "0 to 1800 s): 1200 s of it (66.7 %) has no data and no "
                                  "requests"]
    assert past((0, 1800)) == [] and past((1200, None)) == []  # inside; to the data's end
    with pytest.raises(TraceError, match=r"field 'window': the window \[3000, 4000\) s is "
                       r"outside the data \(the data covers 0 to 1800 s\)"):
        load_trace(path, TraceOptions(window=(3000, 4000)))


def test_servegen_multimodal_prompts_sum_text_and_media(tmp_path: Path) -> None:
    """ServeGen's multimodal chunks (alibaba/ServeGen data/multimodal/mm-image, commit f891d11)
    give no input_tokens: a prompt is text_tokens plus image_count images of image_tokens each
    (and audio, video alike), as ServeGen's construct.py sums them. They were refused:
    "field '0.input_tokens': missing"."""
    dataset = {"0": {"text_tokens": "{136: 0.5, 372: 0.5}", "image_tokens": "{1196: 0.5, 1222: 0.5}",
                     "audio_tokens": "{0: 1.0}", "video_tokens": "{0: 1.0}",
                     "image_count": "{1: 0.5, 2: 0.5}", "audio_count": "{0: 1.0}",
                     "video_count": "{0: 1.0}", "output_tokens": "{21: 0.5, 22: 0.5}"}}
    _servegen_chunk(tmp_path, 0, "0,2,1.0,Gamma,1.0,0.5\n", dataset)
    w = load_trace(tmp_path / "chunk-0-trace.csv", TraceOptions(window=(0, 600))).workload
    sums = {t + a + b for t in (136, 372) for a in (1196, 1222) for b in (0, 1196, 1222)}
    assert set(w.prompt_tokens.tolist()) <= sums and len(w) > 900
    assert abs(float(w.prompt_tokens.mean()) - (254 + 1.5 * 1209)) < 30
    del dataset["0"]["image_count"]
    _servegen_chunk(tmp_path, 1, "0,2,1.0,Gamma,1.0,0.5\n", dataset)
    with pytest.raises(TraceError, match=r"field '0\.image_count': missing"):
        load_trace(tmp_path / "chunk-1-trace.csv", TraceOptions(window=(0, 600)))


def test_servegen_zero_token_outputs_are_dropped_and_counted(tmp_path: Path) -> None:
    """Published chunks give 0-token outputs a probability (m-mid chunk 101 at 237600 s:
    6.5e-7): the whole chunk was refused ('a token count below 1'); such draws are failed
    requests, dropped and counted as BurstGPT's are."""
    dataset = {"0": {"input_tokens": "{100: 1.0}", "output_tokens": "{0: 0.25, 7: 0.75}"}}
    _servegen_chunk(tmp_path, 5, "0,4,1.0,Gamma,1.0,0.25\n", dataset)
    loaded = load_trace(tmp_path / "chunk-5-trace.csv", TraceOptions(window=(0, 600)))
    (reason, dropped), = loaded.report.dropped
    assert "0 output tokens" in reason and abs(dropped - 600) < 6 * np.sqrt(450)
    assert set(loaded.workload.output_tokens.tolist()) == {7}
    assert any(f"dropped {dropped}" in w for w in loaded.report.warnings)


def test_servegen_errors(tmp_path: Path) -> None:
    dataset = {"0": {"input_tokens": "{100: 1.0}", "output_tokens": "{7: 1.0}"}}
    _servegen_chunk(tmp_path, 1, "0,10,1.0,Gamma,1.0,0.1\n600,x,1,Gamma,1,1\n", dataset)
    with pytest.raises(TraceError, match=r"chunk-1-trace.csv: line 2: field 'rate': not a "
                       r"number"):
        load_trace(tmp_path / "chunk-1-trace.csv", TraceOptions(window=(0, 600)))
    bad = {"0": {"input_tokens": "{100: 0.5}", "output_tokens": "{7: 1.0}"}}
    _servegen_chunk(tmp_path, 2, "0,10,1.0,Gamma,1.0,0.1\n", bad)
    with pytest.raises(TraceError, match=r"field '0.input_tokens': probabilities sum to 0.5"):
        load_trace(tmp_path / "chunk-2-trace.csv", TraceOptions(window=(0, 600)))
    evil = {"0": {"input_tokens": "__import__('os').system('true')", "output_tokens": "{7: 1}"}}
    _servegen_chunk(tmp_path, 3, "0,10,1.0,Gamma,1.0,0.1\n", evil)
    with pytest.raises(TraceError, match="not a Python dict literal"):
        load_trace(tmp_path / "chunk-3-trace.csv", TraceOptions(window=(0, 600)))
    with pytest.raises(TraceError, match="has no chunk 9"):
        load_trace(tmp_path, TraceOptions(clients=(9,)))


def test_generic_columns_left_unread_are_warned_of_with_the_likely_mapping(tmp_path: Path) -> None:
    """A generic file's column the format does not read by its name (OpenAI's max_tokens) is
    warned of with the --column that maps it; mapped, it is read and only the rest is named."""
    text = "arrival_s,prompt_tokens,output_tokens,max_tokens,priority\n0,5,3,64,high\n1,5,3,64,low\n"
    for name in ("g.csv", "g.jsonl"):
        path = tmp_path / name
        if name.endswith(".jsonl"):
            keys = text.splitlines()[0].split(",")
            rows = [dict(zip(keys, r.split(","), strict=True)) for r in text.splitlines()[1:]]
            write(path, "".join(json.dumps({k: (v if k == "priority" else float(v))
                                            for k, v in r.items()}) + "\n" for r in rows))
        else:
            write(path, text)
        loaded = load_trace(path)
        assert loaded.workload.max_output_tokens.tolist() == [2048, 2048]
        (warning,) = loaded.report.warnings
        assert warning.startswith("columns not read: max_tokens, priority (the generic format "
                                  "reads arrival_s, prompt_tokens")
        assert warning.endswith("; e.g. --column max_output_tokens=max_tokens)")
        mapped = load_trace(path, TraceOptions(columns={"max_output_tokens": "max_tokens"}))
        assert mapped.workload.max_output_tokens.tolist() == [64, 64]
        assert mapped.report.warnings == ("columns not read: priority (the generic format reads "
                                          "arrival_s, prompt_tokens, output_tokens, "
                                          "max_output_tokens, tier, deadline_s, id, hash_ids, "
                                          "timeout_s; --column FIELD=COLUMN, in a scenario "
                                          "[workload.options] columns, maps one)",)
        assert not any("max_tokens" in a for a in mapped.report.assumed)
