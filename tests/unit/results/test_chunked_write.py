"""Run directories are written a row group at a time: the same file as one whole-table write,
read back equal, however many groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvbudget.results import run_result


def _cols(n: int) -> tuple[dict[str, object], dict[str, str]]:
    rng = np.random.default_rng(n)
    cols: dict[str, object] = {
        "request_id": np.arange(n, dtype=np.int64),
        "ttft_s": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
        "status": np.array(["completed", "expired", ""], dtype=object)[rng.integers(0, 3, n)],
    }
    return cols, {"request_id": "int64", "ttft_s": "float64", "status": "str"}


@pytest.mark.parametrize("n", [0, 1, 7, 3000])
def test_the_file_is_the_one_a_whole_table_write_makes(tmp_path: Path, n: int) -> None:
    cols, schema = _cols(n)
    run_result._write_parquet(cols, schema, tmp_path / "chunked.parquet", pa, pq)
    pq.write_table(run_result._arrow_table(cols, schema, pa), tmp_path / "whole.parquet")
    assert (tmp_path / "chunked.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


@pytest.mark.parametrize("n", [0, 1, 5, 6, 3001])
def test_row_groups_read_back_as_the_columns(tmp_path: Path, n: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_result, "ROW_GROUP_ROWS", 5)
    cols, schema = _cols(n)
    path = tmp_path / "r.parquet"
    run_result._write_parquet(cols, schema, path, pa, pq)
    assert pq.ParquetFile(path).num_row_groups == max(1, -(-n // 5))
    back = pq.read_table(path)
    assert back.column_names == list(schema)
    np.testing.assert_array_equal(back["request_id"].to_numpy(), cols["request_id"])
    np.testing.assert_array_equal(back["ttft_s"].to_numpy(), cols["ttft_s"])
    assert back["status"].to_pylist() == [str(s) for s in cols["status"]]  # type: ignore[attr-defined]
