"""Benchmark runners, one per framework, each run in that framework's own virtualenv."""
