"""The shard recipes of docs/how-to/shards.md: the GitLab file valid against GitLab's
schema, the Kubernetes Jobs and the Bazel target read and their keys checked, and every
option they pass one that exists."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.plugin.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
GITLAB = ROOT / "docs" / "ci" / "gitlab-ci.yml"
KUBERNETES = ROOT / "docs" / "ci" / "kubernetes-job.yml"
PAGE = ROOT / "docs" / "how-to" / "shards.md"
pytest.importorskip("check_jsonschema")


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.gitlab-ci"]
    return subprocess.run([*argv, str(path)], capture_output=True, text=True)


def load_all(path: Path) -> list[Any]:
    from ruamel.yaml import YAML  # check-jsonschema's own YAML reader

    return list(YAML(typ="safe").load_all(path.read_text()))


def flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))


def test_the_gitlab_file_is_valid_against_gitlabs_schema() -> None:
    done = schema_check(GITLAB)
    assert (done.returncode, done.stdout.strip()) == (0, "ok -- validation done")


def test_the_gitlab_schema_check_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    # `when: sometimes` is none of GitLab's values.
    broken.write_text(GITLAB.read_text().replace("when: always #", "when: sometimes #", 1))
    done = schema_check(broken)
    assert done.returncode == 1 and "validation errors" in done.stdout


def test_the_gitlab_shards_run_in_parallel_and_merge_after() -> None:
    [pipeline] = load_all(GITLAB)
    shard, report = pipeline["vault-shard"], pipeline["vault-report"]
    assert shard["parallel"] == 4
    [run] = [line for line in shard["script"] if line.startswith("pytest ")]
    assert "--vault-shard auto" in run and "$CI_NODE_INDEX" in run
    assert flags(run) <= {o.flag for o in OPTIONS} | {"--junit-xml"}
    assert report["needs"] == [{"job": "vault-shard", "artifacts": True}]
    assert report["script"][-1] == (
        "vault-report shard-*.parquet --merge-to all.parquet --html all.html"
    )
    assert shard["artifacts"]["paths"] == ["shard-*.parquet"]


def test_the_kubernetes_indexed_job_says_its_total_and_merges_after() -> None:
    shards, merge = load_all(KUBERNETES)
    assert (shards["kind"], merge["kind"]) == ("Job", "Job")
    spec = shards["spec"]
    assert spec["completionMode"] == "Indexed"
    [container] = spec["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # Kubernetes gives no total: VAULT_SHARD_TOTAL says it, equal to the completions.
    assert int(env["VAULT_SHARD_TOTAL"]) == spec["completions"] == spec["parallelism"] == 4
    [run] = container["args"]
    assert "--vault-shard auto" in run and "$JOB_COMPLETION_INDEX" in run
    assert flags(run) <= {o.flag for o in OPTIONS}
    [merger] = merge["spec"]["template"]["spec"]["containers"]
    assert merger["args"] == [
        "vault-report /results/shard-*.parquet --merge-to /results/all.parquet "
        "--html /results/all.html"
    ]
    volumes = {
        v["persistentVolumeClaim"]["claimName"]
        for job in (shards, merge)
        for v in job["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes == {"vault-results"}  # the shards write where the merge reads


def _python_blocks_under(heading: str) -> list[str]:
    text = PAGE.read_text().split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_the_bazel_target_shards_and_its_main_runs_the_shard_bazel_says() -> None:
    build, main = _python_blocks_under("Bazel: `shard_count`")
    # Starlark is Python's syntax: the BUILD file parses, and names the target's shards.
    calls = [n for n in ast.walk(ast.parse(build)) if isinstance(n, ast.Call)]
    [target] = [c for c in calls if getattr(c.func, "id", None) == "py_test"]
    keywords = {k.arg: k.value for k in target.keywords}
    assert ast.literal_eval(keywords["shard_count"]) == 4
    assert ast.literal_eval(keywords["main"]) == "vault_test.py"
    ast.parse(main)
    assert '"--vault-shard=auto"' in main and "TEST_UNDECLARED_OUTPUTS_DIR" in main
    assert flags(main) <= {o.flag for o in OPTIONS}
