"""Author facts: the common model shared by the audit ingress, the fact index and `reverser resolve`."""
