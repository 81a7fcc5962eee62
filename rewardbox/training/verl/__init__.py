"""The verl backend: configuration, Ray job, agent loop, rows, merge (docs/scale.md)."""
