"""The per-request CSV of LMCache's multi-round QA benchmark and of LMBench's workloads.

Seen published with no licence at the commit that holds it (reproduced here in shape, not
copied): github.com/toslali-ibm/llm-d-benchmark collected/data/openshift/exp-0/vllm-70b/
LMBench_sharegpt_output_1.csv at 7711565 (Llama-3-70B on vLLM and llm-d, LMBench's sharegpt
workload at 1 request a second, 252 requests): refused with "missing column 'output_tokens'
needed by the generic format", which no --column can mend (the file has no E2E column: it is
finish_time - launch_time). The columns are those of LMCache's benchmarks/multi-round-qa
(``UserSession.summary``; the same file in vllm-project/production-stack at 0a330da, and the
header LMCache/LMCache commits as benchmarks/multi-round-qa/summary.csv) and of LMBench
(LMCache/LMBench at 18fe892, 3-workloads/sharegpt/workload_execution/sharegpt-qa.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

LMBENCH = """prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time
700,270,0.18,16.2,1746155409.6,1746155425.98
540,330,0.15,20.1,1746155410.6,1746155430.85
550,290,0.18,17.5,1746155411.6,1746155429.28
1340,240,0.18,14.7,1746155413.6,1746155428.48
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "summary.csv"
    path.write_text(text)
    return path


def test_an_lmbench_csv_is_read_at_its_sends(tmp_path: Path) -> None:
    path = _write(tmp_path, LMBENCH)
    assert detect_recording_format(path) == "multi-round-qa"
    rec = read_recording(path)
    assert rec.tool == "multi-round-qa"
    m = rec.measured.sort_values("arrival_s")
    assert m["arrival_s"].tolist() == pytest.approx([0.0, 1.0, 2.0, 4.0])
    assert m["ttft_s"].tolist() == pytest.approx([0.18, 0.15, 0.18, 0.18])
    assert m["e2e_s"].tolist() == pytest.approx([16.38, 20.25, 17.68, 14.88])
    assert m["output_tokens"].tolist() == [270, 330, 290, 240]
    assert rec.counts["num_measured"] == 4
    assert rec.stages[0].load == "unknown"
    assert any("LMBench workload" in n and "not shared" in n for n in rec.notes)


def test_a_multi_round_summary_shares_each_users_history(tmp_path: Path) -> None:
    rows = ["prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,"
            "launch_time,finish_time"]
    for user, t0 in ((1, 100.0), (2, 100.5)):
        for q, prompt in enumerate((1100, 1300, 1500), start=1):
            t = t0 + 3 * (q - 1)
            rows.append(f"{prompt},100,0.1,1.0,{user},{q},{t},{t + 1.1}")
    rec = read_recording(_write(tmp_path, "\n".join(rows) + "\n"))
    w = rec.workload
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    hashes = [w.prefix_hashes[lo:hi].tolist()
              for lo, hi in zip(w.prefix_offsets[:-1], w.prefix_offsets[1:], strict=True)]
    by_user = [hashes[i] for i in np.argsort(rec.measured["arrival_s"].to_numpy(),
                                              kind="stable")]
    first, second = by_user[0], by_user[2]  # user 1's first and second questions
    assert second[:len(first)] == first and len(second) == 1300 // 16
    assert any("4 requests are later turns of 2 multi-turn conversations (user_id, "
               "question_id)" in n and "nor than the user's question before it ended" in n
               for n in rec.notes)
    assert any("each user sent its next question only after its last answer" in n
               for n in rec.notes)


@pytest.mark.parametrize(("text", "said"), [
    ("prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,launch_time,"
     "finish_time\n", "lists no request"),
    (LMBENCH.replace("0.15,20.1", "0.15,x"), "line 3: field 'generation_time': not a number"),
    (LMBENCH.replace("1746155430.85", "1746155410.7"), "line 3: field 'finish_time': the "
     "request ends"),
])
def test_bad_files_name_the_line(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(TraceError, match=said):
        read_recording(_write(tmp_path, text))


def test_the_system_prompt_is_shared_across_users(tmp_path: Path) -> None:
    # every user's first question begins with the same system prompt
    # (UserSession._build_system_prompt): its length is not in the CSV, the README's 1000
    # tokens are assumed and its whole blocks get one set of hashes in every user's requests;
    # a user of one question shares it too
    rows = ["prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,"
            "launch_time,finish_time"]
    for user, t0, prompts in ((1, 100.0, (3100, 3300)), (2, 100.5, (3100, 3300)),
                              (3, 101.0, (3100,))):
        for q, prompt in enumerate(prompts, start=1):
            t = t0 + 3 * (q - 1)
            rows.append(f"{prompt},100,0.1,1.0,{user},{q},{t},{t + 1.1}")
    rec = read_recording(_write(tmp_path, "\n".join(rows) + "\n"))
    w = rec.workload
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    hashes = [w.prefix_hashes[lo:hi].tolist()
              for lo, hi in zip(w.prefix_offsets[:-1], w.prefix_offsets[1:], strict=True)]
    order = np.argsort(rec.measured["arrival_s"].to_numpy(), kind="stable")
    u1q1, u2q1, u3q1, u1q2, u2q2 = (hashes[i] for i in order)
    system = 1000 // 16
    assert u1q1[:system] == u2q1[:system] == u3q1[:system] == u2q2[:system]
    assert u1q1[system] != u2q1[system]  # each user's own context after it
    assert u1q2[:len(u1q1)] == u1q1  # and each user's history, as before
    assert len(u3q1) == system and len(u1q2) == 3300 // 16
    assert any("1000 tokens assumed" in n and "62 16-token KV blocks shared by every user"
               in n for n in rec.notes)


def test_a_system_prompt_of_less_than_a_block_shares_nothing(tmp_path: Path) -> None:
    text = ("prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,"
            "launch_time,finish_time\n12,10,0.1,1.0,1,1,100.0,101.1\n"
            "12,10,0.1,1.0,2,1,100.5,101.6\n")
    rec = read_recording(_write(tmp_path, text))
    assert rec.workload.prefix_hashes is None
    assert any("11 tokens assumed" in n and "nothing shared across users" in n
               for n in rec.notes)
