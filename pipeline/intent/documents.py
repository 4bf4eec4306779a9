"""A YAML file as its documents, each with its exact text, so one can change and the rest stay byte-identical.

A YAML stream separates documents with a `---` line (and may end one with `...`). Such a line can
never be content: the YAML spec forbids a line that starts with `---` or `...` followed by a space
or its end inside any scalar, block scalars included. So splitting on those lines is exact, and a
file can be put back together from its documents' texts and the separator lines between them.

The file's encoding is kept aside: a UTF-8 byte order mark and CRLF line endings are taken off
for the edit and put back when the file is written (`YamlFile.encode`), so neither is lost and
neither reaches the YAML library. What cannot be edited without loss is refused here, by name:
bytes that are not UTF-8, mixed line endings, files above `MAX_FILE_BYTES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "MAX_FILE_BYTES",
    "Document",
    "IntentRefusal",
    "RefusalReason",
    "YamlFile",
    "split_file",
]

MAX_FILE_BYTES = 8 * 1024 * 1024
"""Larger files are refused: an object is at most about 1.5 MiB in etcd, and a file of thousands of
them is a generated bundle, not a file a person edits."""

_BOM = "\ufeff"
_MARKER = re.compile(r"^(---|\.\.\.)(?=[ \t]|$)", re.MULTILINE)


class RefusalReason(StrEnum):
    """Why a file or document is not edited; the value is what status and logs show."""

    NOT_UTF8 = "NotUTF8"
    MIXED_LINE_ENDINGS = "MixedLineEndings"
    TOO_LARGE = "TooLarge"
    DIRECTIVES = "YAMLDirectives"
    INLINE_DOCUMENT_START = "InlineDocumentStart"
    INVALID_YAML = "InvalidYAML"
    DUPLICATE_KEY = "DuplicateKey"
    ANCHORS = "AnchorsAndAliases"
    TAGS = "CustomTags"
    NOT_A_MAPPING = "NotAMapping"
    NOT_ROUND_TRIP = "NotRoundTripSafe"
    UNSUPPORTED_KUSTOMIZE = "UnsupportedKustomization"
    OWNED_ELSEWHERE = "OwnedByAnotherTool"
    AMBIGUOUS_HOME = "AmbiguousHome"
    SHARED_BASE = "SharedBase"
    RENDER_MISMATCH = "RenderMismatch"
    RENDER_FAILED = "RenderFailed"
    UNPLACEABLE = "Unplaceable"


class IntentRefusal(Exception):
    """A file or document the pipeline does not edit, with the reason and where.

    `path` is the repository path of the file refused (a kustomization, the object's home file),
    when the refusal is about one file: the GitTarget's `Stalled` condition names it, while
    `detail` (which may quote a parser's words about the file) stays in the logs and dead letters.
    """

    def __init__(self, reason: RefusalReason, detail: str, path: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.path = path


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a file: its index, its text without the separator lines, and where it is.

    `start`/`end` are character offsets into `YamlFile.text`; `text` is `YamlFile.text[start:end]`.
    """

    index: int
    start: int
    end: int
    text: str

    @property
    def is_empty(self) -> bool:
        """Whether the document holds nothing but blank lines and comments."""
        return all(not line.strip() or line.lstrip().startswith("#") for line in self.text.splitlines())


@dataclass(frozen=True, slots=True)
class YamlFile:
    """A file's text (LF line endings, no byte order mark), its documents, and how to write it back."""

    text: str
    documents: tuple[Document, ...]
    bom: bool = False
    crlf: bool = False

    def encode(self, text: str) -> bytes:
        """`text` (LF line endings) as this file's bytes: its byte order mark and line endings put back."""
        if self.crlf:
            text = text.replace("\n", "\r\n")
        return ((_BOM if self.bom else "") + text).encode("utf-8")

    def replaced(self, index: int, text: str) -> str:
        """The file's text with document `index` replaced by `text` and every other byte kept."""
        document = self.documents[index]
        return self.text[: document.start] + text + self.text[document.end :]

    def without(self, index: int) -> str | None:
        """The file's text without document `index` and one separator next to it; None when nothing
        else with content would remain (the file is then deleted, not left as an empty stream)."""
        others = [d for d in self.documents if d.index != index]
        if all(d.is_empty for d in others):
            return None
        document = self.documents[index]
        before = self.text[: document.start]
        after = self.text[document.end :]
        if index > 0:
            # drop the separator line that opened this document
            cut = before.rstrip("\n").rfind("\n") + 1
            return before[:cut] + after
        # the first document: drop the separator line that closes it
        newline = after.find("\n")
        return before + (after[newline + 1 :] if newline >= 0 else "")

    def appended(self, text: str) -> str:
        """The file's text with a new document `text` after the last one."""
        body = self.text if self.text.endswith("\n") or not self.text else self.text + "\n"
        return f"{body}---\n{text}"


def _decode(data: bytes, path: str) -> tuple[str, bool, bool]:
    if len(data) > MAX_FILE_BYTES:
        raise IntentRefusal(
            RefusalReason.TOO_LARGE, f"{path} has {len(data)} bytes (limit {MAX_FILE_BYTES})", path
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IntentRefusal(RefusalReason.NOT_UTF8, f"{path}: byte {exc.start} is not UTF-8", path) from None
    bom = text.startswith(_BOM)
    if bom:
        text = text[1:]
    crlf_count = text.count("\r\n")
    lone_cr = text.count("\r") - crlf_count
    lf_count = text.count("\n") - crlf_count
    if lone_cr or (crlf_count and lf_count):
        raise IntentRefusal(RefusalReason.MIXED_LINE_ENDINGS, f"{path} mixes line endings", path)
    crlf = crlf_count > 0
    return (text.replace("\r\n", "\n") if crlf else text), bom, crlf


def split_file(data: bytes, path: str = "<file>") -> YamlFile:
    """`data` as its documents; raises IntentRefusal for a file that cannot be edited without loss.

    A document that starts on its `---` line (`--- !tag`, `--- |`) or a file with `%` directives is
    refused: their text does not stand alone between separator lines.
    """
    text, bom, crlf = _decode(data, path)
    documents: list[Document] = []
    start = 0
    opened = False  # whether a `---` opened a document that has not been added yet
    for marker in _MARKER.finditer(text):
        line_end = text.find("\n", marker.start())
        line_end = len(text) if line_end < 0 else line_end
        rest = text[marker.end() : line_end].strip()
        if rest and not rest.startswith("#"):
            raise IntentRefusal(
                RefusalReason.INLINE_DOCUMENT_START, f"{path}: a document starts on its separator line", path
            )
        if marker.start() > start or opened:
            documents.append(Document(len(documents), start, marker.start(), text[start : marker.start()]))
        opened = marker.group(1) == "---"
        start = min(line_end + 1, len(text))
    if start < len(text) or opened or not documents:
        documents.append(Document(len(documents), start, len(text), text[start:]))
    for document in documents:
        # YAML breaks lines at "\n" only (the text is normalised); `splitlines` would also break at
        # a form feed and read `\x0c%` as a directive
        if any(line.startswith("%") for line in document.text.split("\n")):
            raise IntentRefusal(RefusalReason.DIRECTIVES, f"{path}: YAML directives are not edited", path)
    return YamlFile(text=text, documents=tuple(documents), bom=bom, crlf=crlf)
