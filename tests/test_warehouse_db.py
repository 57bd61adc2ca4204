"""warehouse/db.py: transactions, SQL templates, shipped data files; and the rule that
SQL in warehouse/ is composed with ``fill`` only (issue 14: ``str.format`` on SQL breaks
on DuckDB's ``{...}`` struct literals)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import duckdb
import pytest

from warehouse.db import fill, insert_sql, read_data_csv, shipped, transaction

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE t (x INTEGER)")
    yield c
    c.close()


def test_transaction_commits_when_the_block_ends(con):
    with transaction(con):
        con.execute("INSERT INTO t VALUES (1)")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 1


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_transaction_rolls_back_and_reraises(con, error):
    with pytest.raises(error), transaction(con):
        con.execute("INSERT INTO t VALUES (1)")
        raise error("stop")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    with transaction(con):  # the connection is usable again: no transaction left open
        con.execute("INSERT INTO t VALUES (2)")
    assert con.execute("SELECT x FROM t").fetchall() == [(2,)]


def test_fill_leaves_struct_literals_and_other_markers_alone(con):
    template = "SELECT {'a': $v, 'b': {col}} AS s, {col} + 1 AS y FROM {table}"
    sql = fill(template, col="x", table="t")
    assert sql == "SELECT {'a': $v, 'b': x} AS s, x + 1 AS y FROM t"
    con.execute("INSERT INTO t VALUES (41)")
    assert con.execute(sql, {"v": 7}).fetchone() == ({"a": 7, "b": 41}, 42)
    with pytest.raises(KeyError):  # .format would raise here, on the struct literal
        template.format(col="x", table="t")
    assert fill("WITH {ctes} SELECT {n}", n="1") == "WITH {ctes} SELECT 1"  # filled later


def test_fill_names_a_marker_the_template_lacks():
    with pytest.raises(KeyError, match="tabel"):
        fill("SELECT * FROM {table}", tabel="t")


def test_insert_sql(con):
    con.executemany(insert_sql("t", ["x"]), [[1], [2]])
    assert con.execute("SELECT sum(x) FROM t").fetchone()[0] == 3


def test_shipped_data_csv_skips_comments():
    df = read_data_csv("# source: somewhere\n\na,b\n1,\n")
    assert df.to_dict("records") == [{"a": "1", "b": ""}]
    assert "region" in read_data_csv(shipped("grid_intensity_defaults.csv")).columns


_SQL = re.compile(r"\b(SELECT|INSERT|DELETE|COPY|UPDATE)\b|\bWITH\b.*\bAS\b", re.S)


def sql_built_otherwise(path: Path) -> list[str]:
    """``line: how`` for each f-string, ``.format`` or ``.replace`` call building SQL."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if _SQL.search(text):
                found.append(f"{node.lineno}: f-string")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("format", "replace") and node.args
              and isinstance(node.args[0], ast.Constant) and str(node.args[0].value)[:1] == "{"):
            found.append(f"{node.lineno}: .{node.func.attr}")
    return found


def test_warehouse_sql_is_composed_with_fill_only():
    bad = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "warehouse").rglob("*.py"))
           if (hits := sql_built_otherwise(p))}
    assert bad == {}


def test_the_style_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('t = "x"\nq = f"SELECT * FROM {t}"\nr = "WITH {a} SELECT 1".replace("{a}", t)\n')
    assert sql_built_otherwise(f) == ["2: f-string", "3: .replace"]


@pytest.mark.parametrize("rows", [0, 1, 2047, 2048, 2049, 3001, 20_000])
def test_a_streamed_frame_is_the_frame_df_gives(con, monkeypatch, rows):
    """Chunk by chunk (one vector a chunk here, so ``rows`` cross none, one or many
    chunks' ends), the frame of the columns a straggler read has (text, integers of
    three widths, floats with NULLs, timestamps) and of text NULL throughout some
    chunks (from row 3,000) is ``.df()``'s, dtypes included."""
    import pandas as pd

    from warehouse import db

    monkeypatch.setattr(db, "_CHUNK_VECTORS", 1)
    sql = """
    SELECT 'job' || (i % 7)::VARCHAR AS job_id, (i % 3)::INTEGER AS run_index,
           i::BIGINT AS n, (i % 8)::SMALLINT AS gpu_index,
           CASE WHEN i % 5 = 0 THEN NULL ELSE i / 3 END::FLOAT AS active,
           i * 0.5 AS power, TIMESTAMP '2026-11-16' + i * INTERVAL 1 MINUTE AS ts,
           CASE WHEN i < 3000 THEN 'n' || i::VARCHAR END AS node
    FROM range($rows) t(i) ORDER BY i
    """
    want = con.execute(sql, {"rows": rows}).df()
    got = db.streamed_frame(con, sql, {"rows": rows})
    pd.testing.assert_frame_equal(got, want)
    assert len(got) == rows
