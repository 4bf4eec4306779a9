"""`reverser run --demo`: the whole pipeline on the embedded log, fed by a bundled recording."""
