"""Listeners, connections, framing and the zero-copy send path."""
