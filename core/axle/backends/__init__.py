"""Backends that ship with the core distribution (registered through entry points like
every other plugin)."""
