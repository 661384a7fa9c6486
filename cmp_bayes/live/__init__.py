"""CMP in a running memory system: a live session that survives restarts, and decisions applied back."""
