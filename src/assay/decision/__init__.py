"""Pure functions of the evidence: the rule interface, the next step, the statistics."""
