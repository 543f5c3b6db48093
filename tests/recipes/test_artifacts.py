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


def test_outside_a_checkout_a_mounted_drive_keeps_the_artifacts_and_says_so(tmp_path, monkeypatch):
    from llmlab.recipes import artifacts_dir, where_artifacts_live

    monkeypatch.delenv("LLMLAB_ARTIFACTS", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    drive, hosted = tmp_path / "MyDrive", (tmp_path / "content",)
    hosted[0].mkdir()
    # A hosted runtime without Drive: the home cache, lost with the runtime.
    assert artifacts_dir(create=False, drive=drive) == tmp_path / "home/.cache/llmlab/artifacts"
    assert "lost when this runtime ends" in where_artifacts_live(drive, hosted)
    drive.mkdir()
    assert artifacts_dir(create=False, drive=drive) == drive / "llmlab-artifacts"
    assert "on Google Drive: it outlives this runtime" in where_artifacts_live(drive, hosted)
    # A laptop (no hosted folder) outside a checkout: nothing is lost, the variable is named.
    hosted[0].rmdir()
    drive.rmdir()
    message = where_artifacts_live(drive, hosted)
    assert message.endswith("(LLMLAB_ARTIFACTS chooses another folder).")
