"""Splitting a YAML file into documents keeps every byte: property tests and hostile files."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.intent.documents import MAX_FILE_BYTES, IntentRefusal, RefusalReason, split_file

line = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x85\u2028\u2029"), max_size=20).filter(
    lambda s: not s.startswith(("---", "...", "%"))
)
document_text = st.lists(line, max_size=5).map(lambda lines: "".join(f"{x}\n" for x in lines))


@given(st.lists(document_text, min_size=1, max_size=5), st.booleans())
def test_documents_put_back_together_are_the_file(texts: list[str], leading_marker: bool) -> None:
    # a file that starts with `---` opens its first document there, as YAML reads it
    leading_marker = leading_marker or not texts[0]
    text = ("---\n" if leading_marker else "") + "---\n".join(texts)
    file = split_file(text.encode())
    assert [d.text for d in file.documents] == texts
    for document in file.documents:
        assert file.text[document.start : document.end] == document.text
        assert file.replaced(document.index, document.text) == text


def _holds_nothing(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def test_removing_the_last_document_with_content_deletes_the_file_comments_and_all() -> None:
    """Hypothesis found `['', '#\\n']`: once the object goes, a comment is all that is left, so
    the file is deleted rather than kept as an empty stream."""
    file = split_file(b"a: 1\n---\n# only a comment\n")
    assert file.without(0) is None
    assert file.without(1) == "a: 1\n"


@given(st.lists(document_text, min_size=2, max_size=5), st.data())
def test_removing_a_document_keeps_the_others_byte_for_byte(texts: list[str], data: st.DataObject) -> None:
    # a document of blank lines and comments only holds nothing: see the test below
    texts = [t if not _holds_nothing(t) else "a: 1\n" for t in texts]
    file = split_file("---\n".join(texts).encode())
    index = data.draw(st.integers(0, len(texts) - 1))
    rest = file.without(index)
    assert rest is not None
    assert [d.text for d in split_file(rest.encode()).documents] == texts[:index] + texts[index + 1 :]


def test_removing_the_last_document_with_content_deletes_the_file() -> None:
    file = split_file(b"# only comments\n---\napiVersion: v1\nkind: ConfigMap\n")
    assert file.without(1) is None
    assert file.without(0) == "apiVersion: v1\nkind: ConfigMap\n"


def test_a_byte_order_mark_and_crlf_endings_are_put_back() -> None:
    data = b"\xef\xbb\xbfa: 1\r\n---\r\nb: 2\r\n"
    file = split_file(data)
    assert file.bom
    assert file.crlf
    assert [d.text for d in file.documents] == ["a: 1\n", "b: 2\n"]
    assert file.encode(file.replaced(1, "b: 3\n")) == b"\xef\xbb\xbfa: 1\r\n---\r\nb: 3\r\n"
    assert file.encode(file.text) == data


def test_appending_a_document_separates_it() -> None:
    assert split_file(b"a: 1").appended("b: 2\n") == "a: 1\n---\nb: 2\n"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"a: \xff\n", RefusalReason.NOT_UTF8),
        (b"a: 1\r\nb: 2\n", RefusalReason.MIXED_LINE_ENDINGS),
        (b"a: 1\rb: 2\r", RefusalReason.MIXED_LINE_ENDINGS),
        (b"--- !Ref\nx: 1\n", RefusalReason.INLINE_DOCUMENT_START),
        (b"--- |\n  text\n", RefusalReason.INLINE_DOCUMENT_START),
        (b"%YAML 1.2\n---\na: 1\n", RefusalReason.DIRECTIVES),
        (b"a: " + b"x" * MAX_FILE_BYTES, RefusalReason.TOO_LARGE),
    ],
)
def test_files_that_cannot_be_edited_without_loss_are_refused_by_name(
    data: bytes, reason: RefusalReason
) -> None:
    with pytest.raises(IntentRefusal) as refused:
        split_file(data, "apps/web.yaml")
    assert refused.value.reason is reason
    assert "x" * 100 not in str(refused.value)


def test_a_separator_followed_by_a_comment_is_still_a_separator() -> None:
    file = split_file(b"a: 1\n--- # next\nb: 2\n")
    assert [d.text for d in file.documents] == ["a: 1\n", "b: 2\n"]
