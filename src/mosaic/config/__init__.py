"""Typed input schemas (YAML/JSON) validated once at the boundary."""
