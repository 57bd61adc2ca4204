"""A tiny run of bench/latest.py: it writes, times both sources and prints its table."""

from __future__ import annotations


def test_latest_bench_prints_both_sources(capsys):
    from bench import latest

    assert latest.main(["--nodes", "4", "--gpus", "2", "--ticks", "4", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "8 GPUs, 4 scrapes" in out, out
    for name in ("10 hottest GPUs now", "Overview headline", "Overview rack floor"):
        assert name in out, out
    assert "raw scan" in out and "gpu_latest" in out
    assert "raw scan / gpu_latest" in out[out.index("targets"):]  # measured / target / met
