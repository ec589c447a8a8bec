"""What producers and workers agree on: events, turns, messages, settings, state."""
