"""estimators."""
