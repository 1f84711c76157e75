"""``assay init``: what it detects in a repository, what it asks, what it writes."""
