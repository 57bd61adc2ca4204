"""Emptying or editing the allocations of a test's warehouse with what the writer derives
from them."""

from __future__ import annotations

from warehouse import run_nodes, run_shapes

#: ``allocations`` and the tables the writer keeps from them (warehouse/run_nodes.py,
#: warehouse/run_shapes.py): a test that deletes allocations by SQL deletes these too.
CLEAR_ALLOCATIONS = ("DELETE FROM allocations; DELETE FROM run_nodes; "
                     "DELETE FROM run_node_counts; DELETE FROM run_shapes")


def clear_allocations(con) -> None:
    """Delete every allocation and the rows derived from them (on the writer's ``con``)."""
    con.execute(CLEAR_ALLOCATIONS)


def rebuild_derived(con) -> None:
    """Recompute what the writer keeps from ``allocations`` (on the writer's ``con``), as
    any writer that changes them outside the ingest must (docs/architecture.md)."""
    run_nodes.rebuild(con)
    run_shapes.rebuild(con)


def edit_allocations(w, sql: str, params=None) -> None:
    """Change ``w``'s allocations by hand (``sql`` with ``params``), then
    :func:`rebuild_derived`, in one write: a late or hand-made change the kept tables'
    read checks must notice."""
    def go(con):
        con.execute(sql, params)
        rebuild_derived(con)
    w.write(go).result()
