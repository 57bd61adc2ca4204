"""gpulens: observability, reliability and carbon accounting for GPU clusters."""
__version__ = "0.1.0"
