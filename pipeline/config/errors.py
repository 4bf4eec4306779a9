"""The error every configuration check raises."""

from __future__ import annotations


class ConfigError(Exception):
    """The configuration is invalid; the message names the field path and the reason."""
