"""What travels with the rows (a results file's metadata): enough to tell two runs apart."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_vault.core.text import scrub_url
from pytest_vault.plugin.shard_engines import RUN_ID

if TYPE_CHECKING:
    from pytest_vault.plugin.session import VaultSession


def metadata(vault: VaultSession) -> dict[str, Any]:
    """What travels with the rows: enough to tell two runs apart."""
    from pytest_vault import __version__
    from pytest_vault.corpus.load import corpus_digest

    opts = vault.options
    digest = corpus_digest(vault.corpus_digests)
    return {
        "pytest_vault_version": __version__,
        "models": list(opts.models),
        # The models whose plugin declared them controls (offline, deterministic).
        "controls": sorted(m for m in opts.models if m in opts.specs and opts.specs[m].offline),
        "tracks": list(opts.tracks),
        "architectures": list(opts.architectures),
        # The guard under test in the guarded rows; None when no row is guarded.
        "guard": vault.maker.guard_spec if "guarded" in opts.architectures else None,
        "levels": sorted(opts.levels),
        "strict": opts.strict,
        "max_steps": opts.max_steps,
        "base_url": None if opts.base_url is None else scrub_url(opts.base_url),
        "decode": dict(sorted(vault.decode_record().items())),
        "passports": dict(sorted(vault.passports.items())),
        "corpus_files": dict(sorted(vault.corpus_digests.items())),
        "corpus_digest": digest,
        "shard": None if opts.shard is None else f"{opts.shard[0]}/{opts.shard[1]}",
        # A shard's manifest: its run, which shard, the cells it owns (`plugin.shards`).
        "manifest": shard_manifest(vault, digest),
        "planned": dict(sorted(vault.planned.items())),
        "planned_run": dict(sorted(vault.planned_run.items())),
        "sample": vault.sample,
        "trials": opts.trials,
        # The baseline gate's verdict, when one ran (before the outputs are written).
        "gate": vault.gate_verdict,
        "gate_regressed": vault.gate_regressed,
        "stopped": vault.stopped,
        "attacker": None
        if opts.attacker is None
        else {
            "spec": opts.attacker,
            "rounds": opts.rounds,
            "sees_policy": opts.attacker_sees_policy,
        },
        "judges": list(opts.judges),
        "judge_prompt": judge_record(vault),
    }


def judge_record(vault: VaultSession) -> dict[str, Any] | None:
    """The judge prompt the real-model judges were given: file, digest, token cap,
    temperature (always 0); None when no judge asks a provider."""
    if not vault.maker.our_providers(vault.options.judges):
        return None
    from pytest_vault.core.errors import FileError
    from pytest_vault.harness.judges import (
        TEMPERATURE,
        judge_prompt_file,
        load_judge_prompt,
    )

    try:
        loaded = load_judge_prompt(judge_prompt_file(vault.options.passports))
    except FileError as exc:
        return {"error": str(exc)}
    return {
        "file": loaded.file.name,
        "sha256": loaded.sha256,
        "max_tokens": loaded.prompt.max_tokens,
        "temperature": TEMPERATURE,
    }


def run_id(vault: VaultSession, corpus_digest: str) -> str:
    """The id every shard of one run shares, and no other run: a digest of what the
    shards share (the corpus, the run's plan of cells, the shard total, the settings that
    change a row) and `VAULT_RUN_ID` when set (give it alike to every shard, from the CI's
    own run id, to keep two runs of one plan apart). No engine's own run id is read:
    Bazel and Kubernetes give none, and a re-run shard of one plan merges as the same."""
    assert vault.manifest is not None
    opts = vault.options
    shared: Sequence[object] = (
        corpus_digest,
        vault.manifest["shard"].partition("/")[2],
        vault.manifest["run_cells"],
        vault.manifest["run_cells_sum"],
        opts.strict,
        opts.max_steps,
        opts.guard,
        opts.attacker,
        opts.rounds,
        os.environ.get(RUN_ID),
    )
    text = json.dumps(shared, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shard_manifest(vault: VaultSession, corpus_digest: str) -> dict[str, Any] | None:
    """The shard's manifest for its results metadata; None when the run is no shard."""
    if vault.options.shard is None or vault.manifest is None:
        return None
    own = {k: v for k, v in vault.manifest.items() if k != "said"}
    return {"run": run_id(vault, corpus_digest), **own}
