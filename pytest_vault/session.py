"""The vault session: the state of one pytest run, owned in one place.

It holds the options, the levels (loaded on first use), the model instances, the
event loop the evaluations run on, and the rows recorded so far. The plugin's hooks
only forward to it. Heavy modules are imported when first needed, so that a pytest
run that collects no corpus (or `pytest --help`) pays nothing for them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from pytest_vault.agent import Model, Track
    from pytest_vault.bank import Architecture
    from pytest_vault.corpus import Case
    from pytest_vault.levels import Level

CONTROL_MODELS = (
    "scripted:reference",
    "scripted:obedient",
    "scripted:receipt-trusting",
    "scripted:refuser",
    "scripted:replay",
)


class SpecError(ValueError):
    """A `--vault-model` spec that names no model pytest-vault can run."""


def check_spec(spec: str) -> str:
    if spec in CONTROL_MODELS:
        return spec
    raise SpecError(
        f"--vault-model {spec!r}: unknown model; controls are {', '.join(CONTROL_MODELS)}"
    )


@dataclass(frozen=True)
class Options:
    models: tuple[str, ...] = CONTROL_MODELS
    tracks: tuple[Track, ...] = ("A", "B")
    architectures: tuple[Architecture, ...] = ("model", "guarded")
    levels: frozenset[int] = frozenset({1, 2, 3, 4, 5})
    passports: Path | None = None
    results: Path | None = None
    strict: bool = False
    max_steps: int = 8


@dataclass
class VaultSession:
    options: Options
    rows: list[dict[str, Any]] = field(default_factory=list)
    # Case ids seen in this run, across corpus files, with where they were defined.
    seen_ids: dict[str, str] = field(default_factory=dict)
    # sha256 of each corpus file collected (merged from workers under xdist).
    corpus_digests: dict[str, str] = field(default_factory=dict)
    _levels: dict[int, Level] | None = None
    _models: dict[str, Model] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None

    @property
    def levels(self) -> dict[int, Level]:
        """The five levels; raises `PassportError` (one line) if they cannot be used."""
        if self._levels is None:
            from pytest_vault.levels import SHIPPED, load_levels

            self._levels = load_levels(self.options.passports or SHIPPED)
        return self._levels

    def model(self, spec: str) -> Model:
        if spec not in self._models:
            from pytest_vault.controls import CONTROLS

            self._models[spec] = CONTROLS[check_spec(spec)](spec)
        return self._models[spec]

    def evaluate(
        self, case: Case, spec: str, track: Track, architecture: Architecture
    ) -> dict[str, Any]:
        """Run one evaluation to its results row, and keep the row."""
        from pytest_vault.agent import evaluate
        from pytest_vault.events import row

        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
        ev = self._loop.run_until_complete(
            evaluate(
                case,
                self.levels[case.level],
                self.model(spec),
                track,
                architecture,
                max_steps=self.options.max_steps,
            )
        )
        result = row(ev)
        self.rows.append(result)
        return result

    def metadata(self) -> dict[str, Any]:
        """What travels with the rows: enough to tell two runs apart."""
        from pytest_vault import __version__
        from pytest_vault.levels import SHIPPED

        folder = self.options.passports or SHIPPED
        passports = {
            p.name: "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()
            for p in [*sorted(folder.glob("level-*.json")), folder / "levels.toml"]
            if p.is_file()
        }
        corpus = hashlib.sha256(
            "".join(f"{k}={v}\n" for k, v in sorted(self.corpus_digests.items())).encode()
        ).hexdigest()
        opts = self.options
        return {
            "pytest_vault_version": __version__,
            "models": list(opts.models),
            "tracks": list(opts.tracks),
            "architectures": list(opts.architectures),
            "levels": sorted(opts.levels),
            "strict": opts.strict,
            "max_steps": opts.max_steps,
            "passports": passports,
            "corpus_files": dict(sorted(self.corpus_digests.items())),
            "corpus_digest": "sha256:" + corpus,
        }

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
