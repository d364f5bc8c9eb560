"""Upbound Spaces: the backend behind the Instance managed resource."""
