"""The DuckDB warehouse: schema, single writer, rollups, and every SQL query."""

from warehouse.batches import BatchError
from warehouse.migrate import SchemaTooNew
from warehouse.rollups import Retention
from warehouse.store import Warehouse, WarehouseLocked

__all__ = ["BatchError", "Retention", "SchemaTooNew", "Warehouse", "WarehouseLocked"]
