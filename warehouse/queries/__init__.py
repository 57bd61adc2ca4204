"""Every read query of gpulens, one module per page or report section.

Each query is a plain function ``f(cur, *, now, ...)`` taking a DuckDB cursor (one per
thread: ``Warehouse.reader()``) and keyword arguments, returning a ``pandas.DataFrame``
(or a small ``dict`` of scalars for headline figures). Rules every module follows:

- values travel as parameters (``$name`` / ``?``), never formatted into the SQL text;
- every query is bounded by a time range ending at ``now`` (a naive UTC ``datetime``),
  so a page costs the same on a day-old and on a year-old warehouse;
- units are in column names (``_pct``, ``_c``, ``_kw``, ``_h``), as in the tables.

Modules: ``overview`` (headline figures, rack floor map).
"""
