"""Reverser Pipeline: every change to a Kubernetes cluster as an attributed Git commit."""

__version__ = "0.1.0"
