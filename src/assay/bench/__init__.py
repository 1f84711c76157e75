"""How one benchmark block runs: processes in the sandbox, metrics, checks, the worker."""
