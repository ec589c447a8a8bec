"""Example agents: run a worker with ``--agents examples.weather:agent``."""
