"""ThinkingBox interchange: episode results exported as, and imported from, upstream's files (docs/thinkingbox.md)."""
