"""The commit worker's Git plumbing: clones, trees, objects, signing, SSH and credentials.

Nothing here decides what a commit holds; `pipeline.commit.decide` does. These modules only speak
to git, ssh, gpg and the cluster's Secrets, so the rest of the commit worker can be reasoned
about (and tested) without them.
"""
