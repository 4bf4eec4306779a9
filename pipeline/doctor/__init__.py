"""`reverser doctor`: checks of an installation against the real log, clusters, Git remotes and
audit routes, each failure with the action that fixes it."""
