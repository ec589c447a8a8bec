"""The gateway's routes, one module per resource (``app.py`` mounts them)."""
