"""The journal: the one place that speaks SQL, its seals and the run lock."""
