"""Proposers: small policy objects with one method, ``propose(context, n)``."""
