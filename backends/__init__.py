"""Live backends: the same gateway policies in front of a real OpenAI-compatible server."""
