"""Where artifacts go: the variable, then the checkout, then the home cache."""


def test_artifacts_go_to_the_variable_then_the_checkout_then_the_home_cache(tmp_path, monkeypatch):
    from llmlab.recipes import artifacts_dir

    monkeypatch.setenv("LLMLAB_ARTIFACTS", str(tmp_path / "mine"))
    assert artifacts_dir() == tmp_path / "mine" and (tmp_path / "mine").is_dir()
    monkeypatch.delenv("LLMLAB_ARTIFACTS")
    checkout = tmp_path / "course"
    for folder in ("llmlab", "solutions", "labs"):
        (checkout / folder).mkdir(parents=True)
    monkeypatch.chdir(checkout / "labs")
    assert artifacts_dir(create=False) == checkout / "artifacts"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert artifacts_dir(create=False) == tmp_path / "home" / ".cache" / "llmlab" / "artifacts"
