"""Go text/template, the strict subset gitops-reverser's commit message templates need.

`parse.py` reads the syntax (and refuses what is outside the subset by name), `execute.py` runs
it with Go's rules, `values.py` models Go's values and printing, and `commitdata.py` holds GR's
three message kinds, their data and their defaults. Pure: no I/O.
"""
