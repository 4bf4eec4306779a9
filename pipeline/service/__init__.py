"""`reverser run`: the stages of one process, the metrics/health server and their lifecycle."""
