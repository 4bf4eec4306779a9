"""The intent layer: YAML files people keep in their repositories, read and edited without loss.

The commit worker owns the files it writes at canonical paths. A user's own repository holds the
same objects in files the user laid out: several documents per file, comments, their key order and
quoting, kustomizations. This package is the pure part of writing into such files: splitting a file
into documents with their exact bytes (`documents`), and applying a live change to one document as a
minimal edit that leaves every other byte alone (`edit`). It does no I/O; every refusal is an
`IntentRefusal` naming the reason, so a target can stall with it instead of damaging a file.
"""

from pipeline.intent.documents import Document, IntentRefusal, RefusalReason, YamlFile, split_file

__all__ = ["Document", "IntentRefusal", "RefusalReason", "YamlFile", "split_file"]
