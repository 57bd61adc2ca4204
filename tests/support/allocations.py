"""Emptying the allocations of a test's warehouse with what the writer derives from them."""

from __future__ import annotations

#: ``allocations`` and the tables the writer keeps from them (warehouse/run_nodes.py,
#: warehouse/run_shapes.py): a test that deletes allocations by SQL deletes these too.
CLEAR_ALLOCATIONS = ("DELETE FROM allocations; DELETE FROM run_nodes; "
                     "DELETE FROM run_node_counts; DELETE FROM run_shapes")


def clear_allocations(con) -> None:
    """Delete every allocation and the rows derived from them (on the writer's ``con``)."""
    con.execute(CLEAR_ALLOCATIONS)
