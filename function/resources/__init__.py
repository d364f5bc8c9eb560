"""Builders of composed objects, one module per concern. Each returns plain dicts."""
