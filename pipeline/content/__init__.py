"""What the pipeline mirrors of an object: the sanitize allowlist, its canonical JSON and content key.

Below every stage, because more than one stage needs the same bytes: the watch writes the
sanitized object to the log, and the admission fact source names a version by the key of the
same bytes so the router can join the two (docs/attribution.md, "Admission facts").
"""
