"""The DuckDB warehouse: schema, single writer, rollups, and every SQL query."""
