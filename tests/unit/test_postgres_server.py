"""redlease.testing.PostgresServer's binaries: the newest version folder of Debian's package,
and a loud error saying what to install where there are none."""

from __future__ import annotations

from pathlib import Path

import pytest

from redlease.testing import postgres


def _version(root: Path, version: str) -> Path:
    folder = root / version / "bin"
    folder.mkdir(parents=True)
    (folder / "initdb").touch()
    return folder


def test_the_newest_version_folder_is_used(tmp_path, monkeypatch):
    _version(tmp_path, "9.6")
    newest = _version(tmp_path, "15")
    _version(tmp_path, "13")
    (tmp_path / "16").mkdir()  # a folder without the server binaries (a client-only package)
    monkeypatch.setattr(postgres, "_DEBIAN", tmp_path)
    assert postgres.find_postgres() == newest


def test_no_binaries_says_to_install_postgresql(tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "_DEBIAN", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="apt-get install postgresql"):
        postgres.find_postgres()
    with pytest.raises(RuntimeError, match="apt-get install postgresql"):
        postgres.PostgresServer()
