"""Put turns in, get events out: the Producer and the ``reactq`` command."""

from reactq.producer.client import Producer, TurnHandle

__all__ = ["Producer", "TurnHandle"]
