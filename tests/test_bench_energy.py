"""A tiny run of bench/energy.py (issue 21): job energy from the counters within 2 %, on
the H100 trace built from the recorded fixtures and on the simulator's ground truth."""

from __future__ import annotations


def test_job_energy_matches_the_counter_within_two_percent(capsys):
    from bench import energy

    rc = energy.main(["--minutes", "25", "--jobs", "2", "--sim-hours", "6"])
    out = capsys.readouterr().out
    assert rc == 0, out
    worst = float(out.split("job_energy (counter deltas) ")[1].split(" %")[0])
    assert worst <= 2.0, out
    checks = {line.split("  ")[0]: line.split() for line in out.splitlines()
              if line.startswith(("H100 fixture", "simulator ground truth"))}
    assert set(checks) == {"H100 fixture trace, energy counter (minute tier)",
                           "simulator ground truth, energy counter (minute tier)",
                           "simulator ground truth, counter hourly-scaled (hour tier)"}, out
    for name, cells in checks.items():  # measured / target / met
        assert cells[-3:-1] == ["2", "%"] and cells[-1] == "yes", (name, out)
        assert float(cells[-5]) <= 2.0, (name, out)
