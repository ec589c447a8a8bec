"""The gateway's routes, one module per resource (``factory.py`` mounts them)."""
