"""The passports recorded in the results are the files enforced."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED

from ..results import read_rows
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


def test_metadata_records_the_passport_files_loaded(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    folder = pytester.mkdir("passports")
    for f in SHIPPED.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    custom = (SHIPPED / "level-3.json").read_bytes().replace(b'"1.0.0"', b'"1.0.9"')
    assert custom != (SHIPPED / "level-3.json").read_bytes()
    (folder / "custom.json").write_bytes(custom)
    toml = (folder / "levels.toml").read_text()
    (folder / "levels.toml").write_text(toml.replace('"level-3.json"', '"custom.json"'))
    pytester.runpytest(*REPLAY, "--vault-passports=passports", "--vault-results=out.parquet")
    _, meta = read_rows(pytester.path / "out.parquet")

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    want: dict[str, object] = {
        str(n): {
            "file": f"level-{n}.json",
            "sha256": digest((SHIPPED / f"level-{n}.json").read_bytes()),
        }
        for n in (1, 2, 4, 5)
    }
    want["3"] = {"file": "custom.json", "sha256": digest(custom)}
    want["levels.toml"] = digest((folder / "levels.toml").read_bytes())
    assert meta["passports"] == want
