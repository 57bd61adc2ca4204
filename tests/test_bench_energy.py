"""A tiny run of bench/energy.py (issue 21): job energy from the counters within 2 %."""

from __future__ import annotations


def test_job_energy_matches_the_counter_within_two_percent(capsys):
    from bench import energy

    rc = energy.main(["--minutes", "25", "--jobs", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    worst = float(out.split("job_energy (counter deltas) ")[1].split(" %")[0])
    assert worst <= 2.0, out
