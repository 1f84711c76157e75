"""assay: research-driven optimization with paired statistics.

The public Python API lives in :mod:`assay.api`; the objects it hands out are the frozen
snapshots of :mod:`assay.model`.
"""

__version__ = "0.1.0"
