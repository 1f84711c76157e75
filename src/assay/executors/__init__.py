"""Executors: run blocks on slots (local processes, Ray tasks, SkyPilot nodes)."""
