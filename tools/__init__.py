"""Build helpers run by tools/images.sh on the build machine (standard library only)."""
