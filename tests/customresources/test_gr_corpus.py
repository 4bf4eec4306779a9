"""`reverser config check` on gitops-reverser's own samples and documentation examples, unchanged.

The files are in tests/corpus/gitops-reverser/ (provenance in its README). A sample of a kind this
project does not read yet (ClusterProvider, CommitRequest: another change brings them) joins the
parametrisation by itself once `pipeline.customresources.objects.Kind` knows the kind, so nothing
here is skipped and nothing has to be edited when it lands.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main
from pipeline.customresources.objects import Kind

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "gitops-reverser"
SAMPLES = CORPUS / "samples"
DOCS = CORPUS / "configuration-md"
# the objects' own namespace is the controller's (the quickstart installs into `default`)
NAMESPACE = "default"
KNOWN = {kind.value for kind in Kind}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def _readable(path: Path) -> bool:
    return all(d.get("kind") in KNOWN for d in _documents(path))


def _label(document: dict[str, Any]) -> str:
    meta = document.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName", "")
    where = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
    return f"{document['kind']} {where}"


def _check(documents: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    resources = tmp_path / "resources.yaml"
    resources.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    code = main(["config", "check", str(resources), "--namespace", NAMESPACE])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, "\n".join(lines)
    return lines


def _assert_only_ok_or_unsupported(checked: list[dict[str, Any]], lines: list[str]) -> None:
    for document in checked:
        label = _label(document)
        mine = [line for line in lines if line.startswith(f"{label}: ")]
        assert mine, f"{label} is not in the report:\n" + "\n".join(lines)
        assert all(
            line.endswith(": ok") or ": unsupported (accepted, not acted on): " in line for line in mine
        )


CLUSTER_PROVIDERS = "clusterprovider.yaml"
READABLE_SAMPLES = sorted(p.name for p in SAMPLES.glob("*.yaml") if _readable(p))


def test_the_quickstart_samples_are_all_read() -> None:
    """The parametrisation below can only grow: the quickstart is always in it."""
    assert {
        "quickstart-gitprovider.yaml",
        "quickstart-gittarget.yaml",
        "quickstart-watchrule.yaml",
        "clusterwatchrule.yaml",
    } <= set(READABLE_SAMPLES)


@pytest.mark.parametrize("sample", READABLE_SAMPLES)
def test_each_sample_checks_clean_applied_with_the_others(
    sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `kubectl apply -f config/samples/` applies them: together, in one namespace. The
    ClusterProvider sample is checked on its own: its `default` provider admits GitTargets of
    `team-a` only, so with it the samples' GitTarget in `default` is refused, by gitops-reverser
    as here (tests/customresources/test_clusterprovider.py covers that refusal)."""
    alone = {CLUSTER_PROVIDERS}
    names = [sample] if sample in alone else [n for n in READABLE_SAMPLES if n not in alone]
    together = [d for name in names for d in _documents(SAMPLES / name)]
    lines = _check(together, tmp_path, capsys)
    _assert_only_ok_or_unsupported(_documents(SAMPLES / sample), lines)


def _merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        out[key] = (
            _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


# the section objects a fragment or a referencing example is read with, as a reader applies them
PROVIDER = DOCS / "01-gitprovider.yaml"
TARGET = DOCS / "10-gittarget.yaml"
EXAMPLES = sorted(p.name for p in DOCS.glob("*.yaml") if "-fragment-" in p.name or _readable(p))


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_configuration_md_example_checks_clean(
    example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (provider,) = _documents(PROVIDER)
    (target,) = _documents(TARGET)
    if "-fragment-" in example:
        (fragment,) = _documents(DOCS / example)
        checked = [_merged(provider, fragment)]
        context = [target]
    else:
        checked = _documents(DOCS / example)
        kinds = {d["kind"] for d in checked}
        context = [d for d in (provider, target) if d["kind"] not in kinds]
    lines = _check(checked + context, tmp_path, capsys)
    _assert_only_ok_or_unsupported(checked, lines)
