"""The repository assay optimizes: one git helper, worktrees, patches and merges."""
