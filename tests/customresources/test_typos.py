"""A misspelt field of a custom resource is an error naming the field meant (issue 33, friction 5).

`config check` on a GitTarget with `brnach: main` exited 0: every field this project does not read
is accepted as unsupported, since another gitops-reverser release may define it. A near miss of a
field it does read is no such field: it is refused with "did you mean". Fields of other releases
stay accepted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipeline.customresources.compile import _SUPPORTED
from pipeline.customresources.objects import Kind
from pipeline.customresources.typos import meant_field

REVERSER = Path(sys.executable).with_name("reverser")
TARGET_PATHS = _SUPPORTED[Kind.GIT_TARGET]
RULE_PATHS = _SUPPORTED[Kind.WATCH_RULE]


@pytest.mark.parametrize(
    ("shown", "supported", "meant"),
    [
        ("spec.brnach", TARGET_PATHS, "spec.branch"),
        ("spec.prune.mdoe", TARGET_PATHS, "spec.prune.mode"),
        ("spec.brnach.deeper", TARGET_PATHS, "spec.branch"),
        ("spec.rules[2].resourcs", RULE_PATHS, "spec.rules[2].resources"),
        ("spec.rules[0].sourceNamespce", RULE_PATHS, "spec.rules[0].sourceNamespace"),
        # fields of other releases, or below a field read whole: not typos
        ("spec.commitMessageTemplate", TARGET_PATHS, None),
        ("spec.rules[0].excludeLabels", RULE_PATHS, None),
        ("spec.providerRef.nmae", TARGET_PATHS, None),
    ],
)
def test_a_near_miss_of_a_read_field_names_it(
    shown: str, supported: tuple[str, ...], meant: str | None
) -> None:
    assert meant_field(shown, supported) == meant


def concrete(pattern: str, index: int) -> str:
    return pattern.replace("[]", f"[{index}]")


@given(kind=st.sampled_from(sorted(_SUPPORTED)), data=st.data())
def test_a_read_field_and_anything_below_it_is_never_a_typo(kind: Kind, data: st.DataObject) -> None:
    supported = _SUPPORTED[kind]
    path = concrete(data.draw(st.sampled_from(supported)), data.draw(st.integers(0, 9)))
    child = data.draw(st.from_regex(r"[a-zA-Z]{1,12}", fullmatch=True))
    assert meant_field(path, supported) is None
    assert meant_field(f"{path}.{child}", supported) is None


def test_config_check_refuses_the_misspelt_branch(tmp_path: Path) -> None:
    objects = [
        {
            "apiVersion": "configbutler.ai/v1alpha3",
            "kind": "GitProvider",
            "metadata": {"name": "p", "namespace": "reverser"},
            "spec": {"url": "https://git.example.com/x.git", "allowedBranches": ["*"]},
        },
        {
            "apiVersion": "configbutler.ai/v1alpha3",
            "kind": "GitTarget",
            "metadata": {"name": "t", "namespace": "reverser"},
            "spec": {
                "providerRef": {"name": "p"},
                "brnach": "main",
                "path": "x",
                "commitMessageTemplate": "kept",
            },
        },
    ]
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    done = subprocess.run(
        [str(REVERSER), "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GitTarget reverser/t: error: spec.brnach: unknown field (did you mean spec.branch?)" in (
        done.stdout.splitlines()
    )
