"""Our Go-template renderer against Go's own text/template, byte for byte.

`golden/` is a Go module of the standard library only (GR's structs in its package `git`, so
type names print as in GR). It is built in the test's tmp dir with the installed Go and renders
gitops-reverser's three message kinds with GR's structs, defaults, TrimSpace and
`missingkey=error`. Hypothesis generates templates from the supported subset (fields of each
kind, variables, pipelines, the functions, if/else if/with/range, trimming, comments; some
deliberately wrong: unknown fields, missing map keys, incompatible comparisons) and data; for
each, both must fail, or both succeed with identical output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.gotemplate.commitdata import (
    DEFAULTS,
    GoTemplateError,
    MessageKind,
    Resource,
    effective,
    event_data,
    group_data,
    reconcile_data,
    render,
)

HERE = Path(__file__).parent


class Golden:
    """One long-lived Go process answering render requests line by line."""

    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Golden]:
    go = shutil.which("go")
    assert go is not None, "Go is needed for the golden test (installed on the test machine)"
    work = tmp_path_factory.mktemp("golden") / "src"
    shutil.copytree(HERE / "golden", work)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    subprocess.run([go, "build", "-o", str(work / "golden"), "."], cwd=work, env=env, check=True)
    process = Golden(work / "golden")
    yield process
    process.close()


def ours(request: dict[str, Any]) -> dict[str, Any]:
    kind = MessageKind(request["kind"])
    objects = [Resource(**o) for o in request.get("objects", [])]
    if kind is MessageKind.EVENT:
        data = event_data(objects[0], request["username"], request["target"])
    elif kind is MessageKind.GROUP:
        data = group_data(objects, request["username"], request["target"])
    else:
        data = reconcile_data(
            request["count"],
            request["target"],
            request["group"],
            request["version"],
            request["resource"],
            request["revision"],
        )
    try:
        return {"ok": True, "output": render(effective(kind, request["template"]), data)}
    except GoTemplateError as exc:
        return {"ok": False, "error": str(exc)}


# --- data ------------------------------------------------------------------------------------

names = st.sampled_from(
    ["", "a", "web", "team-a", "alice", "x y", "é", "日本", "system:serviceaccount:ns:sa"]
)
objects = st.builds(
    lambda op, group, version, resource, namespace, name: {
        "operation": op,
        "group": group,
        "version": version,
        "resource": resource,
        "namespace": namespace,
        "name": name,
    },
    st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    st.sampled_from(["", "apps", "batch", "example.com"]),
    st.sampled_from(["v1", "v1beta1"]),
    st.sampled_from(["configmaps", "deployments", "secrets"]),
    st.sampled_from(["", "default", "team-a"]),
    names,
)

FIELDS = {
    "event": [
        "Operation",
        "Group",
        "Version",
        "Resource",
        "Namespace",
        "Name",
        "APIVersion",
        "Username",
        "GitTarget",
    ],
    "group": ["Author", "GitTarget", "Count", "Operations", "Resources"],
    "reconcile": ["Count", "GitTarget", "Group", "Version", "Resource", "APIVersion", "Revision"],
}
REF_FIELDS = ["Group", "Version", "Resource", "Namespace", "Name", "String"]
texts = st.sampled_from(["", " ", "x", ": ", "\n", "  \n\t", "[", "] ", "(", ")", "on ", "resource(s)"])


@st.composite
def values(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    """An operand or a call (parenthesised when it is an argument)."""
    text = draw(_values(kind, depth))
    return f"({text})" if depth and " " in text and not text.startswith(("(", '"')) else text


@st.composite
def _values(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    """An operand or a call: fields, `$` fields, literals, functions, a pipeline in parentheses."""
    fields = FIELDS[kind]
    options = ["field", "root", "literal", "int"]
    if depth < 2:
        options += ["len", "index", "print", "printf", "eq", "ne", "lt", "and", "or", "not", "paren"]
    choice = draw(st.sampled_from(options))
    wrong = draw(st.integers(0, 30)) == 0
    if choice == "field":
        return "." + (
            draw(st.sampled_from(["Nope", "Operations.CREATE", "Count.X"]))
            if wrong
            else draw(st.sampled_from(fields))
        )
    if choice == "root":
        return "$." + draw(st.sampled_from(fields))
    if choice == "literal":
        return json.dumps(draw(st.sampled_from(["", "CREATE", "a b", "%", "x\ty", "é"])), ensure_ascii=False)
    if choice == "int":
        return str(draw(st.integers(-3, 12)))
    if choice == "paren":
        return f"({draw(values(kind, depth + 1))})"
    if choice == "len":
        sized = [f for f in fields if f in ("Resources", "Operations", "Name", "Author", "Resource")]
        return f"len .{draw(st.sampled_from(sized or fields))}"
    if choice == "index":
        if kind == "group":
            return draw(
                st.sampled_from(
                    [
                        'index .Operations "CREATE"',
                        'index .Operations "NONE"',
                        "index .Resources 0",
                        "(index .Resources 0).Name",
                        "index .Resources 7",
                    ]
                )
            )
        return "index .Name 0" if kind == "event" else "index .Revision 0"
    if choice in ("print", "and", "or"):
        count = draw(st.integers(1, 3))
        return choice + "".join(f" {draw(values(kind, depth + 1))}" for _ in range(count))
    if choice == "printf":
        fmt = draw(st.sampled_from(["%s", "%d", "%v", "%5s", "%-4d|", "%s-%s", "100%%", "%v %v", "x"]))
        count = draw(st.integers(0, 2))
        return f'printf "{fmt}"' + "".join(f" {draw(values(kind, depth + 1))}" for _ in range(count))
    if choice == "not":
        return f"not {draw(values(kind, depth + 1))}"
    left = draw(values(kind, depth + 1))
    right = draw(values(kind, depth + 1))
    return f"{choice} {left} {right}"


@st.composite
def templates(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        left = "{{- " if draw(st.booleans()) and draw(st.booleans()) else "{{"
        right = " -}}" if draw(st.booleans()) and draw(st.booleans()) else "}}"
        choice = draw(
            st.sampled_from(
                ["text", "value", "value", "pipe", "comment"] + (["if", "with", "range"] if depth < 2 else [])
            )
        )
        if choice == "text":
            parts.append(draw(texts))
        elif choice == "value":
            parts.append(f"{left}{draw(values(kind))}{right}")
        elif choice == "pipe":
            parts.append(f'{left}{draw(values(kind))} | printf "<%v>"{right}')
        elif choice == "comment":
            parts.append(f"{left}/* note */{right}")
        elif choice == "if":
            body = draw(templates(kind, depth + 1))
            chain = (
                f"{{{{else if {draw(values(kind))}}}}}{draw(templates(kind, depth + 1))}"
                if draw(st.booleans())
                else ""
            )
            orelse = f"{{{{else}}}}{draw(templates(kind, depth + 1))}" if draw(st.booleans()) else ""
            parts.append(f"{left}if {draw(values(kind))}{right}{body}{chain}{orelse}{{{{end}}}}")
        elif choice == "with":
            orelse = f"{{{{else}}}}{draw(templates(kind, depth + 1))}" if draw(st.booleans()) else ""
            body = "{{$v}}" + draw(templates(kind, depth + 1))
            parts.append(f"{left}with $v := {draw(values(kind))}{right}{body}{orelse}{{{{end}}}}")
        else:
            if kind == "group":
                over = draw(st.sampled_from([".Resources", ".Operations"]))
                item = draw(st.sampled_from(["{{.}}", "{{$i}}={{$e}}", "{{$e}}{{if $i}},{{end}}"]))
                if over == ".Resources" and draw(st.booleans()):
                    item += "{{." + draw(st.sampled_from(REF_FIELDS)) + "}}"
            else:
                over = "." + draw(st.sampled_from(FIELDS[kind]))
                item = "{{.}}"
            orelse = "{{else}}none" if draw(st.booleans()) else ""
            parts.append(f"{left}range $i, $e := {over}{right}{item}{orelse}{{{{end}}}}")
    return "".join(parts)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["event", "group", "reconcile"]))
    request: dict[str, Any] = {
        "kind": kind,
        "template": draw(templates(kind)),
        "username": draw(names),
        "target": draw(names),
        "objects": draw(st.lists(objects, min_size=1 if kind == "event" else 0, max_size=4)),
        "count": draw(st.integers(0, 20)),
        "group": draw(st.sampled_from(["", "apps"])),
        "version": draw(st.sampled_from(["", "v1"])),
        "resource": draw(st.sampled_from(["", "secrets", "deployments"])),
        "revision": draw(st.sampled_from(["", "1331"])),
    }
    return request


def agree(golden: Golden, request: dict[str, Any]) -> None:
    go = golden.ask(request)
    mine = ours(request)
    assert mine["ok"] == go["ok"], (request["template"], go, mine)
    if go["ok"]:
        assert mine["output"] == go["output"], request["template"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    request=requests(),
    which=st.sampled_from([k.value for k in MessageKind]),
    blank=st.sampled_from(["", "  \n"]),
)
def test_defaults_render_as_go_renders_them(
    golden: Golden, request: dict[str, Any], which: str, blank: str
) -> None:
    """GR's three defaults (an empty or blank template means the default) on generated data."""
    request = {**request, "kind": which, "template": blank}
    if which == "event" and not request["objects"]:
        request["objects"] = [
            {
                "operation": "CREATE",
                "group": "",
                "version": "v1",
                "resource": "configmaps",
                "namespace": "",
                "name": "a",
            }
        ]
    agree(golden, request)
    assert ours(request)["ok"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests())
def test_generated_templates_render_byte_identically(golden: Golden, request: dict[str, Any]) -> None:
    agree(golden, request)


DOCUMENTED = [
    ("event", "[{{.Operation}}] {{.APIVersion}}/{{.Resource}}/{{.Name}} by {{.Username}}"),
    ("event", '{{.Operation | printf "%-6s"}} {{.Namespace}}/{{.Name}} ({{.GitTarget}})'),
    (
        "group",
        "{{.Author}} on {{.GitTarget}}: {{.Count}} resource(s)\n\n{{range .Resources}}- {{.}}\n{{end}}",
    ),
    ("group", "{{.Count}} changes{{with .Operations}} ({{range $op, $n := .}}{{$op}}={{$n}} {{end}}){{end}}"),
    (
        "group",
        '{{if gt (len .Resources) 1}}batch{{else}}single{{end}}: {{index .Operations "UPDATE"}} updated',
    ),
    ("reconcile", DEFAULTS[MessageKind.RECONCILE]),
    ("reconcile", "sync {{.GitTarget}}{{if .APIVersion}} {{.APIVersion}}/{{.Resource}}{{end}} #{{.Count}}"),
    ("reconcile", "  {{- .Count -}}  \n"),
]


#: gitops-reverser's docs/configuration.md examples, as copied into the corpus (provenance there)
GR_DOCS = Path(__file__).resolve().parents[1] / "corpus" / "gitops-reverser" / "configuration-md"
_TEMPLATE_KINDS = {"eventTemplate": "event", "groupTemplate": "group", "reconcileTemplate": "reconcile"}


def _docs_templates() -> list[tuple[str, str, str]]:
    """(file, kind, template) of every message template GR's configuration docs show."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(GR_DOCS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            message = ((document or {}).get("spec") or {}).get("commit", {}).get("message") or {}
            for field, kind in _TEMPLATE_KINDS.items():
                if field in message:
                    found.append((path.name, kind, message[field]))
    return found


def test_grs_docs_show_templates_of_every_kind() -> None:
    assert {kind for _, kind, _ in _docs_templates()} == set(_TEMPLATE_KINDS.values())


@pytest.mark.parametrize(("source", "kind", "template"), _docs_templates())
def test_grs_documented_templates_render_as_gr_renders_them(
    golden: Golden, source: str, kind: str, template: str
) -> None:
    """Each template of GR's docs, unchanged, renders byte for byte as Go renders it with GR's data."""
    request = {
        "kind": kind,
        "template": template,
        "username": "alice",
        "target": "apps",
        "objects": [
            {
                "operation": "UPDATE",
                "group": "apps",
                "version": "v1",
                "resource": "deployments",
                "namespace": "team-a",
                "name": "web",
            }
        ],
        "count": 3,
        "group": "apps",
        "version": "v1",
        "resource": "deployments",
        "revision": "4711",
    }
    agree(golden, request)
    assert ours(request)["ok"], source


@pytest.mark.parametrize(("kind", "template"), DOCUMENTED)
def test_documented_templates(golden: Golden, kind: str, template: str) -> None:
    objs = [
        {
            "operation": "CREATE",
            "group": "apps",
            "version": "v1",
            "resource": "deployments",
            "namespace": "team-a",
            "name": "web",
        },
        {
            "operation": "UPDATE",
            "group": "",
            "version": "v1",
            "resource": "configmaps",
            "namespace": "team-a",
            "name": "cfg",
        },
    ]
    request = {
        "kind": kind,
        "template": template,
        "username": "alice",
        "target": "apps",
        "objects": objs,
        "count": 2,
        "group": "",
        "version": "v1",
        "resource": "configmaps",
        "revision": "77",
    }
    agree(golden, request)
    assert ours(request)["ok"]
