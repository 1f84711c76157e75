"""``assay plan`` and ``assay simulate``: a run's cost and outcome before it runs."""
