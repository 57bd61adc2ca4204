"""Helpers shared by the benchmarks: timing, memory, tables, the targets table.

Every figure a benchmark prints is a median (and p95 where said) over repeated runs:
the 2-core machine these run on is shared with other work, so single runs are noisy.
"""

from __future__ import annotations

import resource
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the benches run as scripts: python bench/x.py
    sys.path.insert(0, str(ROOT))


def p95(values: Sequence[float]) -> float:
    """The 95th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def repeat(fn: Callable[[], object], runs: int, warmup: int = 1) -> list[float]:
    """Seconds of ``runs`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def current_rss_bytes() -> int:
    """This process's resident set size now, bytes (/proc/self/statm, Linux)."""
    import os

    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Start this process's peak RSS (``VmHWM``) again from its current RSS, so the next
    :func:`peak_rss_bytes` is one step's own peak: "5" to /proc/self/clear_refs (Linux
    4.0 and later). False where that cannot be done: the peak then stays the process's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, bytes: ``VmHWM`` of
    /proc/self/status (KiB there). ``ru_maxrss`` is the fallback only: a child spawned by
    fork + exec starts with its parent's high-water mark, so a service process started
    by a benchmark would report the benchmark's memory."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def work_parent(workdir: str | Path | None) -> str | None:
    """``--workdir`` made when missing (its parent too), as ``dir=`` for tempfile,
    which needs it to exist; None (the system's temporary directory) stays None."""
    if workdir:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        return str(workdir)
    return None


def dir_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]],
                align: str | None = None) -> None:
    """A plain-text table; ``align`` gives 'l' or 'r' per column (default: first left)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    align = align or "l" + "r" * (len(header) - 1)
    for k, r in enumerate(cells):
        print("  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                        for c, w, a in zip(r, widths, align, strict=True)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def machine() -> str:
    """One line naming the machine: cores, memory, Python, DuckDB."""
    import os
    import platform

    import duckdb

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} cores, {mem / 2**30:.0f} GiB, Python "
            f"{platform.python_version()}, DuckDB {duckdb.__version__}; "
            f"load average at start {load:.2f}")


def met(ok: bool | None) -> str:
    """The met column: yes, NO, or n/a where nothing was measured."""
    return "n/a" if ok is None else "yes" if ok else "NO"


def print_targets(rows: Sequence[tuple[str, str, str, bool | None]],
                  title: str = "targets") -> bool:
    """Every target of a benchmark as one table: figure / measured / target / met
    (``make bench`` prints these for issue 17). ``rows``: (figure, measured as text,
    target as text, met: True, False or None when not measured). Returns whether every
    measured target was met."""
    print(f"\n{title}")
    print_table(["figure", "measured", "target", "met"],
                [(f, m, t, met(ok)) for f, m, t, ok in rows], align="lrrl")
    return all(ok is not False for *_, ok in rows)
