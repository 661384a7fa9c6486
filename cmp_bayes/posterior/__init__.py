"""posterior."""
