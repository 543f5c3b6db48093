"""Reading one file: clear errors that name the file and say what to do, and undecodable bytes
replaced and counted when asked."""

import pytest

from llmlab.data.documents import read_document, undecodable_byte_count
from llmlab.data.errors import DataError


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
        (b"caf\xe9 au lait", "not valid UTF-8 \\(byte 3"),
    ],
)
def test_bad_files_are_errors_that_name_the_file_and_say_what_to_do(tmp_path, content, message):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as error:
        read_document(path)
    assert str(path) in str(error.value)


def test_invalid_utf8_can_be_replaced_and_the_bad_bytes_are_counted(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café crème".encode("latin-1"))
    doc = read_document(path, errors="replace")
    assert doc.text == "caf\ufffd cr\ufffdme"
    assert doc.undecodable_bytes == 2
    assert undecodable_byte_count("ok é".encode()) == 0
