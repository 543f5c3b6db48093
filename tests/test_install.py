"""tools/install.py, which every make target runs first: it refuses an old Python, rebuilds an
environment another Python made or an install left half done, and takes PyTorch's CPU build on
Linux without an NVIDIA driver. Machines and environments are faked; nothing is installed."""

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("install", ROOT / "tools" / "install.py")
install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install)

THIS = sys.version_info


def fake_venv(path: Path, version: str, stamp: str | None = None) -> Path:
    """A folder shaped like a virtual environment made by Python `version`."""
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").touch()
    (path / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion = {version}\n")
    if stamp is not None:
        (path / install.STAMP).write_text(stamp)
    return path


@pytest.mark.parametrize("version", [(3, 9, 18), (3, 10, 13)])
def test_an_old_python_is_refused_with_what_to_do(version):
    problem = install.python_problem(version)
    assert "3.11 or newer" in problem and "PYTHON=python3.11" in problem
    assert ".".join(map(str, version)) in problem


@pytest.mark.parametrize("version", [(3, 11, 0), (3, 13, 1)])
def test_a_recent_python_is_accepted(version):
    assert install.python_problem(version) is None


def test_the_installer_and_pyproject_agree_on_the_oldest_python():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    oldest = ".".join(map(str, install.MIN_PYTHON))
    assert oldest in SpecifierSet(requires) and "3.10" not in SpecifierSet(requires)


def test_no_environment_is_created(tmp_path):
    assert install.plan(tmp_path / ".venv", THIS, "pins")[0] == "create"


def test_an_environment_made_by_another_python_is_rebuilt(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.10.13", stamp="pins")
    action, reason = install.plan(venv, (3, 11, 7), "pins")
    assert action == "rebuild" and "3.10" in reason


def test_a_half_installed_environment_is_rebuilt(tmp_path):
    """The issue's case: an install failed (no stamp), and a retry must not build on its rests."""
    venv = fake_venv(tmp_path / ".venv", "3.11.7")
    action, reason = install.plan(venv, (3, 11, 7), "pins")
    assert action == "rebuild" and "did not finish" in reason


def test_an_environment_whose_python_is_gone_is_rebuilt(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.11.7", stamp="pins")
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(tmp_path / "removed-python")
    assert install.plan(venv, (3, 11, 7), "pins")[0] == "rebuild"


def test_changed_pins_update_in_place_and_unchanged_ones_reuse(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.11.7", stamp="old pins")
    assert install.plan(venv, (3, 11, 9), "new pins")[0] == "update"
    assert install.plan(venv, (3, 11, 9), "old pins")[0] == "reuse"


def test_virtualenv_style_config_is_read(tmp_path):
    (tmp_path / "pyvenv.cfg").write_text("home = /usr\nversion_info = 3.12.1.final.0\n")
    assert install.venv_python_version(tmp_path) == "3.12.1.final.0"


def test_the_stamp_changes_with_the_pins(tmp_path):
    for name in install.PIN_FILES:
        (tmp_path / name).write_text("a==1\n")
    before = install.fingerprint(tmp_path)
    (tmp_path / "constraints.txt").write_text("a==2\n")
    assert install.fingerprint(tmp_path) != before


def test_linux_without_an_nvidia_driver_takes_the_cpu_build_from_pytorchs_index():
    args = install.torch_pip_args("Linux", nvidia_driver=False, torch_pin="2.13.0")
    assert args[-1] == "torch==2.13.0+cpu"
    assert args[args.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    # Bounded retries: where the index is unreachable the install must not stall.
    assert int(args[args.index("--retries") + 1]) <= 2


@pytest.mark.parametrize("system, driver", [("Linux", True), ("Darwin", False)])
def test_a_gpu_vm_and_a_mac_take_pypis_torch(system, driver):
    assert install.torch_pip_args(system, nvidia_driver=driver, torch_pin="2.13.0") == []


@pytest.mark.parametrize("smi, proc, expected", [
    (None, False, False), ("/usr/bin/nvidia-smi", False, True), (None, True, True),
])
def test_an_nvidia_driver_is_seen_by_nvidia_smi_or_its_proc_entry(
    monkeypatch, tmp_path, smi, proc, expected
):
    monkeypatch.setattr(install.shutil, "which", lambda name: smi)
    proc_file = tmp_path / "version"
    if proc:
        proc_file.write_text("NVRM version: 550.54\n")
    monkeypatch.setattr(install, "NVIDIA_PROC", proc_file)
    assert install.has_nvidia_driver() is expected


def test_torch_pin_is_read_from_constraints():
    assert install.pinned_version("torch") == "2.13.0"


@pytest.fixture
def fake_machine(monkeypatch):
    """Linux without a driver; `python -m venv` and pip only record what they were asked."""
    pip_calls = []

    def make_venv(command):
        fake_venv(Path(command[-1]), ".".join(map(str, THIS[:3])))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(install, "has_nvidia_driver", lambda: False)
    monkeypatch.setattr(install.subprocess, "run", make_venv)
    monkeypatch.setattr(install, "pip", lambda venv, args: pip_calls.append(args))
    return pip_calls


def test_a_rebuild_starts_from_an_empty_environment_and_a_second_run_reuses_it(
    fake_machine, tmp_path
):
    venv = fake_venv(tmp_path / ".venv", "3.10.13")
    (venv / "left-over").touch()
    install.main(["install.py", str(venv)])
    assert not (venv / "left-over").exists()
    assert (venv / install.STAMP).read_text() == install.fingerprint()
    assert [args[-1] for args in fake_machine] == ["torch==2.13.0+cpu", ".[course,extras,dev]"]
    fake_machine.clear()
    install.main(["install.py", str(venv)])
    assert fake_machine == []


def test_a_failed_install_writes_no_stamp(fake_machine, monkeypatch, tmp_path):
    def failing_pip(venv, args):
        raise SystemExit("pip failed")

    monkeypatch.setattr(install, "pip", failing_pip)
    with pytest.raises(SystemExit):
        install.main(["install.py", str(tmp_path / ".venv")])
    assert not (tmp_path / ".venv" / install.STAMP).exists()


def test_a_python_without_its_venv_module_says_which_package_to_install(
    fake_machine, monkeypatch, tmp_path
):
    # Debian's python3.X without python3.X-venv: `python -m venv` fails (ensurepip is missing).
    monkeypatch.setattr(install.subprocess, "run", lambda command: SimpleNamespace(returncode=1))
    minor = f"{THIS[0]}.{THIS[1]}"
    with pytest.raises(SystemExit, match=rf"apt install python{minor}-venv"):
        install.main(["install.py", str(tmp_path / ".venv")])
    assert fake_machine == []  # nothing installed into a half-made environment
