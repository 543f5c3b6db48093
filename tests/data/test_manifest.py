"""The manifest: a round trip and its differences, and the committed one describes the built-in
corpus."""

from llmlab.data import corpus
from llmlab.data.documents import Document
from llmlab.data.manifest import compare_with_manifest, make_manifest, read_manifest, write_manifest


def test_manifest_round_trip_and_differences(tmp_path):
    docs = [Document("stdlib", "a.py", "x = 1\n"), Document("pydoc", "if", "The if statement")]
    path = tmp_path / "manifest.json"
    write_manifest(path, make_manifest(docs, "test", "two documents"))
    manifest = read_manifest(path)
    assert manifest["documents"] == 2 and manifest["bytes"] == 6 + 16
    assert len(path.read_text().splitlines()) == 12  # one line per document
    assert compare_with_manifest(docs, manifest) == []
    changed = [Document("stdlib", "a.py", "x = 2\n"), Document("stdlib", "b.py", "y = 1\n")]
    diff = compare_with_manifest(changed, manifest)
    assert "changed: stdlib/a.py" in diff and "only here: stdlib/b.py" in diff
    assert "missing here: pydoc/if" in diff
    assert compare_with_manifest(docs[::-1], manifest)[-1] == "the same documents in another order"


def test_the_committed_manifest_describes_the_builtin_corpus():
    manifest = read_manifest(corpus.Path(__file__).parents[2] / "data" / "corpus_manifest.json")
    assert manifest["corpus"] == "builtin" and manifest["rule"] == corpus.BUILTIN_RULE
    assert manifest["documents"] == len(manifest["files"]) > 500
