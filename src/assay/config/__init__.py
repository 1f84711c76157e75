"""The validated ``assay.toml``: frozen specs, their parsing, the watch language, prices."""
