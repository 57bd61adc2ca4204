"""A deterministic simulated GPU cluster: gpulens's embedded default source.

``Cluster(SimConfig(...), anchor)`` gives topology, telemetry, events, scheduler state and
grid carbon intensity as tables of the warehouse schema, for any window of time, and the
wire formats (dcgm-exporter text, ``squeue --json``, ``sacct --json``) of live mode.
"""

from .cluster import Cluster
from .config import MODELS, GpuModel, SimConfig
from .incidents import Incident

__all__ = ["Cluster", "GpuModel", "Incident", "MODELS", "SimConfig"]
