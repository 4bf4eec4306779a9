"""The tenant boundary (issue 27): what an object outside the controller's namespace may ask for.

Every finding of the issue has a test here that passed as `ok` before: a tenant's variable, file
and foreign-Secret reads, the glob that froze the loop, the WatchRule whose record stopped every
later version, the folder takeover. A property test draws random tenant objects and checks that
the compiler never raises, stays within its step budget and never yields settings that reach
outside the object's namespace.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import EncryptionSettings, Settings
from pipeline.customresources.compile import CompiledConfig, compile_resources
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef, parse_object
from pipeline.customresources.state import publishable, record_bytes
from pipeline.customresources.status import object_status
from pipeline.customresources.tenancy import TENANT_PIPELINE, CompileLimits
from tests.support.hypothesis_profile import TIMING_CHECKS

HOME = "reverser"
TEAM = "team-a"
API = "configbutler.ai/v1alpha3"
TEAM_URL = "https://git.example.com/team-a/state.git"
PLATFORM_URL = "https://git.example.com/platform/live-state.git"
GRANT = {
    "namespaces": ["team-*"],
    "url_prefixes": ["https://git.example.com/{namespace}/"],
    "path_prefixes": ["{namespace}"],
}
TENANTS = Settings(custom_resources={"tenants": [GRANT]})
DEFAULT_DIGEST_KEY_ENV = EncryptionSettings.model_fields["digest_key_env"].default


def _doc(kind: str, name: str, spec: dict[str, Any], namespace: str = TEAM, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": spec,
    }


def _provider(namespace: str = TEAM, url: str = TEAM_URL, **spec: Any) -> dict[str, Any]:
    return _doc("GitProvider", "repo", {"url": url, "allowedBranches": ["main"], **spec}, namespace)


def _target(
    namespace: str = TEAM, name: str = "apps", path: str = "team-a/apps", **spec: Any
) -> dict[str, Any]:
    body = {"providerRef": {"name": "repo"}, "branch": "main", "path": path, **spec}
    return _doc("GitTarget", name, body, namespace)


def _compile(*documents: dict[str, Any], base: Settings = TENANTS, **kwargs: Any) -> CompiledConfig:
    return compile_resources(
        [parse_object(copy.deepcopy(d)) for d in documents], home_namespace=HOME, base=base, **kwargs
    )


def _errors(compiled: CompiledConfig, kind: Kind) -> list[tuple[str, str]]:
    return [(e.path, e.message) for ref, e in compiled.errors if ref.kind is kind]


# --- finding 1: spec.pipeline reads outside the tenant's namespace ---------------------------------


def test_a_tenant_cannot_send_a_pod_variable_as_basic_auth_over_plain_http() -> None:
    """The reproduction: the worker sent REVERSER_LOG__SASL__PASSWORD to the tenant's http:// remote."""
    provider = _provider(
        url="http://git.example.com/team-a/state.git",
        pipeline={
            "username_env": "HOSTNAME",
            "password_env": "REVERSER_LOG__SASL__PASSWORD",
            "allow_plain_http_credentials": True,
        },
    )
    compiled = _compile(provider, _target())
    assert compiled.providers == []
    assert compiled.targets == []
    fields = [path for path, _ in _errors(compiled, Kind.GIT_PROVIDER)]
    assert fields == [
        "spec.pipeline.allow_plain_http_credentials",
        "spec.pipeline.password_env",
        "spec.pipeline.username_env",
    ]
    (message, *_) = [m for _, m in _errors(compiled, Kind.GIT_PROVIDER)]
    assert "may be set only in the controller's namespace 'reverser'" in message
    assert "push_cooldown_s" in message, "the refusal says what a tenant may set"
    assert "REVERSER_LOG__SASL__PASSWORD" not in str(compiled.providers)


@pytest.mark.parametrize(
    ("pipeline", "field"),
    [
        (
            {"ssh": {"private_key_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}},
            "spec.pipeline.ssh",
        ),
        ({"ssh": {"known_hosts_file": "/etc/passwd", "allow_unknown_host_keys": True}}, "spec.pipeline.ssh"),
        (
            {"signing": {"format": "ssh", "key_file": "/etc/reverser/platform-signing-key"}},
            "spec.pipeline.signing",
        ),
        ({"signing": {"format": "openpgp"}}, "spec.pipeline.signing"),
    ],
)
def test_a_tenant_cannot_name_a_pod_file(pipeline: dict[str, Any], field: str) -> None:
    compiled = _compile(_provider(pipeline=pipeline), _target())
    assert compiled.providers == []
    assert [path for path, _ in _errors(compiled, Kind.GIT_PROVIDER)] == [field]


def test_a_tenant_cannot_sign_with_a_secret_of_the_controllers_namespace() -> None:
    signing = {"format": "ssh", "key_secret": {"namespace": HOME, "name": "platform-signing-key"}}
    compiled = _compile(_provider(pipeline={"signing": signing}), _target())
    assert compiled.providers == []
    assert [path for path, _ in _errors(compiled, Kind.GIT_PROVIDER)] == ["spec.pipeline.signing"]
    # spec.commit.signing names a Secret of the object's own namespace, and that stays allowed
    own = _compile(_provider(commit={"signing": {"secretRef": {"name": "signer"}}}), _target())
    (provider,) = own.providers
    assert provider.signing is not None
    assert provider.signing.key_secret is not None
    assert provider.signing.key_secret.describe() == f"{TEAM}/signer"


@pytest.mark.parametrize(
    ("encryption", "field"),
    [
        ({"digest_key_env": "REVERSER_LOG__SASL__PASSWORD"}, "spec.pipeline.encryption.digest_key_env"),
        ({"sops_config": "/etc/reverser/.sops.yaml"}, "spec.pipeline.encryption.sops_config"),
    ],
)
def test_a_tenant_target_cannot_name_a_variable_or_a_file(encryption: dict[str, Any], field: str) -> None:
    age = {"age_recipients": ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"]}
    compiled = _compile(_provider(), _target(pipeline={"encryption": {**age, **encryption}}))
    assert compiled.targets == []
    assert [path for path, _ in _errors(compiled, Kind.GIT_TARGET)] == [field]
    tuned = _compile(_provider(), _target(pipeline={"encryption": age, "commit_window_s": 2}))
    (target,) = tuned.targets
    assert target.encryption is not None
    assert target.encryption.digest_key_env == DEFAULT_DIGEST_KEY_ENV


def test_a_tenant_target_cannot_choose_the_program_the_worker_runs() -> None:
    """`kustomize.binary` names an executable the commit worker runs on every edit."""
    kustomize = {"render": "on", "binary": "/bin/sh"}
    compiled = _compile(_provider(), _target(pipeline={"kustomize": kustomize}))
    assert compiled.targets == []
    assert [path for path, _ in _errors(compiled, Kind.GIT_TARGET)] == ["spec.pipeline.kustomize"]


def test_tuning_fields_are_allowed_within_bounds() -> None:
    tuned = {"push_cooldown_s": 30, "credentials_refresh_s": 600, "window_max_bytes": 1024}
    compiled = _compile(_provider(pipeline=tuned), _target())
    (provider,) = compiled.providers
    assert (provider.push_cooldown_s, provider.credentials_refresh_s) == (30, 600)
    over = _compile(_provider(pipeline={"window_max_bytes": 10**12}), _target())
    assert _errors(over, Kind.GIT_PROVIDER) == [
        (
            "spec.pipeline.window_max_bytes",
            "must be between 1 and 8.38861e+06 outside the controller's namespace",
        )
    ]


def test_the_home_namespace_may_still_set_every_field() -> None:
    provider = _provider(
        HOME, PLATFORM_URL, pipeline={"username_env": "GIT_USER", "password_env": "GIT_PASSWORD"}
    )
    compiled = _compile(provider, _target(HOME, path="clusters/prod"), base=Settings())
    (accepted,) = compiled.providers
    assert accepted.password_env == "GIT_PASSWORD"


# --- repositories and folders: a platform-owned grant, deny by default -----------------------------


def test_a_namespace_without_a_grant_gets_no_provider() -> None:
    compiled = _compile(_provider(), _target(), base=Settings())
    ((path, message),) = _errors(compiled, Kind.GIT_PROVIDER)
    assert path == "spec.url"
    assert "no entry of custom_resources.tenants grants namespace 'team-a' a repository" in message


@pytest.mark.parametrize(
    "url",
    [
        PLATFORM_URL,
        "https://git.example.com/team-a-evil/state.git",
        "https://git.example.com/team-a/../platform/live-state.git",
        "https://git.example.com/team-a/%2e%2e/platform/live-state.git",
        "https://git.example.com/team-ab/x.git",
        "https://evil.example.com/team-a/state.git",
    ],
)
def test_a_url_outside_the_grant_is_refused(url: str) -> None:
    compiled = _compile(_provider(url=url), _target())
    ((path, _),) = _errors(compiled, Kind.GIT_PROVIDER)
    assert path == "spec.url"


def test_a_path_outside_the_grant_is_refused() -> None:
    compiled = _compile(_provider(), _target(path="clusters"))
    ((path, message),) = _errors(compiled, Kind.GIT_TARGET)
    assert path == "spec.path"
    assert "'clusters' is not inside a folder custom_resources.tenants grants namespace 'team-a'" in message
    assert _compile(_provider(), _target(path="team-a")).errors == []


def test_a_tenant_mirrors_only_the_clusters_granted() -> None:
    clusters = [{"name": "home"}, {"name": "other"}]
    base = Settings(clusters=clusters, custom_resources={"tenants": [GRANT]})
    elsewhere = _compile(_provider(), _target(clusterProviderRef={"name": "other"}), base=base)
    assert _errors(elsewhere, Kind.GIT_TARGET) == [
        (
            "spec.clusterProviderRef.name",
            "cluster 'other' is not granted to namespace 'team-a' by custom_resources.tenants (home)",
        )
    ]
    assert _compile(_provider(), _target(clusterProviderRef={"name": "home"}), base=base).errors == []
    granted = Settings(clusters=clusters, custom_resources={"tenants": [{**GRANT, "clusters": ["other"]}]})
    assert _compile(_provider(), _target(clusterProviderRef={"name": "other"}), base=granted).errors == []


# --- finding 4: a tenant takes over another target's folder ----------------------------------------


def test_a_tenant_cannot_take_over_the_platforms_folder() -> None:
    """`a-team` sorts before `reverser`: namespace order used to keep the tenant's target and drop
    the platform's `clusters/prod` (its streams stopped)."""
    grant = {
        "namespaces": ["a-team"],
        "url_prefixes": ["https://git.example.com/platform/"],
        "path_prefixes": ["."],
    }
    base = Settings(custom_resources={"tenants": [grant]})
    platform = [
        _provider(HOME, PLATFORM_URL),
        _target(HOME, "prod", "clusters/prod"),
    ]
    tenant = [_provider("a-team", PLATFORM_URL.removesuffix(".git")), _target("a-team", "grab", "clusters")]
    compiled = _compile(*platform, *tenant, base=base)
    assert [t.name for t in compiled.targets] == ["prod"]
    ((ref, error),) = compiled.errors
    assert ref == ObjectRef(Kind.GIT_TARGET, "a-team", "grab")
    assert error.path == "spec.path"
    assert "overlaps folder clusters/prod of target prod (GitTarget reverser/prod)" in error.message
    assert "it is in the controller's namespace 'reverser'" in error.message
    status = object_status(compiled.reports[ref], None)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "target prod" in ready["message"]


def test_between_tenants_the_older_target_keeps_the_folder() -> None:
    grant = {"namespaces": ["*"], "url_prefixes": ["https://git.example.com/shared/"], "path_prefixes": ["."]}
    base = Settings(custom_resources={"tenants": [grant]})
    url = "https://git.example.com/shared/repo.git"
    old = datetime(2025, 1, 1, tzinfo=UTC).isoformat()
    new = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    first = _target("zz-team", "first", "apps")
    first["metadata"]["creationTimestamp"] = old
    second = _target("aa-team", "second", "apps/nested")
    second["metadata"]["creationTimestamp"] = new
    compiled = _compile(_provider("zz-team", url), first, _provider("aa-team", url), second, base=base)
    assert [t.name for t in compiled.targets] == ["zz-team/first"]
    ((ref, error),) = compiled.errors
    assert ref.namespace == "aa-team"
    assert (
        f"target zz-team/first (GitTarget zz-team/first), which keeps it: it is older (created {old})"
        in error.message
    )


# --- finding 2: service stoppers in compile ---------------------------------------------------------


def test_a_backtracking_branch_glob_costs_linear_steps() -> None:
    """`*a*a*a*a*a*a*a*a*a*b` against a 40-character branch took 34 s on the event loop."""
    pattern = "*a*a*a*a*a*a*a*a*a*b"
    branch = "a" * 40
    compiled = _compile(_provider(allowedBranches=["main", pattern]), _target(branch=branch))
    assert _errors(compiled, Kind.GIT_TARGET) == [
        ("spec.branch", f"branch {branch!r} is not in spec.allowedBranches of GitProvider team-a/repo")
    ]
    assert compiled.steps < 50_000


def test_branch_globs_follow_go_path_match() -> None:
    compiled = _compile(_provider(allowedBranches=["main", "feature/*"]), _target(branch="feature/x/y"))
    assert [p for p, _ in _errors(compiled, Kind.GIT_TARGET)] == ["spec.branch"]
    bad = _compile(_provider(allowedBranches=["main", "[x-"]), _target())
    assert [p for p, _ in _errors(bad, Kind.GIT_PROVIDER)] == ["spec.allowedBranches[1]"]
    long = _compile(_provider(allowedBranches=["main", "*" * 200]), _target())
    assert _errors(long, Kind.GIT_PROVIDER) == [("spec.allowedBranches[1]", "is longer than 128 characters")]


def _huge_rule(namespace: str = TEAM, name: str = "huge") -> dict[str, Any]:
    """The issue's 24 KiB WatchRule: 200 groups x 2000 resources, 5.4 MB once compiled."""
    groups = [f"g{i}.example.com" for i in range(200)]
    resources = [f"r{i}" for i in range(2000)]
    item = {"apiGroups": groups, "resources": resources}
    return _doc("WatchRule", name, {"targetRef": {"name": "apps"}, "rules": [item]}, namespace)


def test_an_oversized_watch_rule_is_refused_in_its_status_and_the_rest_is_published() -> None:
    small = _doc(
        "WatchRule", "small", {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]}
    )
    compiled = _compile(_provider(), _target(), _huge_rule(), small)
    (target,) = compiled.targets
    assert [r.resources for r in target.rules] == [["configmaps"]]
    huge = compiled.reports[ObjectRef(Kind.WATCH_RULE, TEAM, "huge")]
    assert [e.describe() for e in huge.errors] == [
        "spec.rules[0]: names 400000 apiGroups x resources entries, more than 512",
        "spec.rules: name 400000 entries in all, more than 2048",
    ]
    assert record_bytes(compiled) < 64 * 1024


def test_many_tenants_near_their_caps_still_publish_a_record_that_fits() -> None:
    """Each rule is within its caps; together they are over a (small) topic limit: the largest tenant
    objects are left out with the reason, and the platform's are published."""
    base = Settings(
        custom_resources={"tenants": [GRANT]},
        log={"topics": {"max_message_bytes": 20_000}},
    )
    documents = [_provider(HOME, PLATFORM_URL), _target(HOME, "prod", "clusters/prod")]
    for team in range(6):
        namespace = f"team-{team}"
        rule = {"resources": [f"r{i}" for i in range(100)], "apiGroups": ["a.example.com", "b.example.com"]}
        documents += [
            _provider(namespace, f"https://git.example.com/{namespace}/state.git"),
            _target(namespace, "apps", f"{namespace}/apps"),
            _doc("WatchRule", "apps", {"targetRef": {"name": "apps"}, "rules": [rule]}, namespace),
        ]
    unlimited = _compile(*documents)
    assert record_bytes(unlimited) > 20_000, "the test needs a record over the limit"
    compiled = publishable([parse_object(d) for d in documents], home_namespace=HOME, base=base)
    assert record_bytes(compiled) <= 20_000
    assert "prod" in {t.name for t in compiled.targets}
    left_out = [ref for ref, report in compiled.reports.items() if not report.accepted]
    assert left_out
    assert all(ref.namespace.startswith("team-") for ref in left_out)
    messages = {e.message for ref, e in compiled.errors if e.path == "spec"}
    assert any(
        "over the config topic's limit of 20000 bytes (log.topics.max_message_bytes)" in m for m in messages
    )


def test_a_namespace_over_its_share_keeps_its_oldest_objects() -> None:
    limits = CompileLimits(namespace_objects=4)
    documents = [_provider(), _target()]
    for document in documents:
        document["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    for index in range(3):
        rule = _doc(
            "WatchRule",
            f"r{index}",
            {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]},
        )
        rule["metadata"]["creationTimestamp"] = f"2026-01-0{index + 1}T00:00:00Z"
        documents.append(rule)
    compiled = _compile(*documents, limits=limits)
    refused = [(ref.name, e.path) for ref, e in compiled.errors]
    assert refused == [("r2", "metadata.namespace")]
    (target,) = compiled.targets
    assert len(target.rules) == 2


def test_an_object_over_its_step_budget_is_refused_and_the_others_compile() -> None:
    """The compiler's own budget: a small one here, so an ordinary glob check runs it out."""
    limits = CompileLimits(object_steps=500)
    greedy = _target(name="greedy", path="team-a/greedy", branch="m" * 200)
    compiled = _compile(_provider(allowedBranches=["main", "m*" * 30]), _target(), greedy, limits=limits)
    assert [t.name for t in compiled.targets] == ["team-a/apps"]
    ((ref, error),) = compiled.errors
    assert ref.name == "greedy"
    assert error.describe() == "spec: compiling it took more than 500 steps; make the object smaller"
    assert compiled.steps <= 500 * len(compiled.reports)


def test_a_deeply_nested_spec_is_refused_without_recursing() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    resource = CustomResource(ObjectRef(Kind.GIT_TARGET, TEAM, "deep"), {"pipeline": deep})
    compiled = compile_resources([resource], home_namespace=HOME, base=TENANTS)
    assert [e.describe() for _, e in compiled.errors] == ["spec: is nested deeper than 32 levels"]


# --- the property: any tenant object, however written -----------------------------------------------

_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["/etc/passwd", "REVERSER_LOG__SASL__PASSWORD", HOME, TEAM, "main", "*", "team-a/apps"]),
)
_VALUE = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_PIPELINE_KEYS = sorted(
    {
        "username_env",
        "password_env",
        "allow_plain_http_credentials",
        "ssh",
        "signing",
        "credentials_secret",
        "known_hosts_ref",
        "encryption",
        "commit_message",
        *(key.split(".")[0] for fields in TENANT_PIPELINE.values() for key in fields),
    }
)
_SSH = st.fixed_dictionaries(
    {},
    optional={
        "private_key_file": st.just("/etc/key"),
        "private_key_env": st.just("KEY"),
        "known_hosts_file": st.just("/etc/hosts"),
        "allow_unknown_host_keys": st.booleans(),
    },
)
_SIGNING = st.fixed_dictionaries(
    {"format": st.sampled_from(["ssh", "openpgp"])},
    optional={
        "key_file": st.just("/etc/key"),
        "key_env": st.just("KEY"),
        "key_secret": st.fixed_dictionaries(
            {"namespace": st.sampled_from([HOME, TEAM]), "name": st.just("k")}
        ),
        "gpg_home": st.just("/root/.gnupg"),
    },
)
_ENCRYPTION = st.fixed_dictionaries(
    {},
    optional={
        "age_recipients": st.just(["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"]),
        "digest_key_env": st.sampled_from(["REVERSER_LOG__SASL__PASSWORD", DEFAULT_DIGEST_KEY_ENV]),
        "sops_config": st.just("/etc/sops.yaml"),
        "sensitive_resources": st.just(["tokens"]),
    },
)
_PIPELINE = st.dictionaries(
    st.sampled_from(_PIPELINE_KEYS),
    st.one_of(_VALUE, _SSH, _SIGNING, _ENCRYPTION, st.floats(0, 10_000), st.just(True)),
    max_size=5,
)
_SPECS: dict[Kind, st.SearchStrategy[dict[str, Any]]] = {
    Kind.GIT_PROVIDER: st.fixed_dictionaries(
        {"url": st.sampled_from([TEAM_URL, PLATFORM_URL, "http://u:p@git.example.com/team-a/x", "/srv/git"])},
        optional={
            "allowedBranches": st.one_of(
                st.lists(st.text(alphabet="ma*?[]^-\\/in", max_size=20), max_size=4), _VALUE
            ),
            "secretRef": st.one_of(st.fixed_dictionaries({"name": st.just("creds")}), _VALUE),
            "knownHostsRef": _VALUE,
            "commit": _VALUE,
            "push": _VALUE,
            "pipeline": st.one_of(_PIPELINE, _VALUE),
        },
    ),
    Kind.GIT_TARGET: st.fixed_dictionaries(
        {"providerRef": st.just({"name": "repo"})},
        optional={
            "branch": st.one_of(st.just("main"), st.text(alphabet="ma/", max_size=40), _VALUE),
            "path": st.one_of(st.sampled_from(["team-a", "team-a/x", "clusters", "."]), _VALUE),
            "encryption": _VALUE,
            "prune": _VALUE,
            "clusterProviderRef": _VALUE,
            "pipeline": st.one_of(_PIPELINE, _VALUE),
        },
    ),
    Kind.WATCH_RULE: st.fixed_dictionaries(
        {"targetRef": st.just({"name": "apps"})},
        optional={"rules": st.one_of(st.lists(_VALUE, max_size=3), _VALUE), "sourceNamespace": _VALUE},
    ),
}
# Mostly valid objects with random spec.pipeline dicts (so settings do get accepted and are
# checked), besides objects of any shape at all.
_TUNABLE = st.dictionaries(
    st.sampled_from(sorted({key.split(".")[0] for fields in TENANT_PIPELINE.values() for key in fields})),
    st.one_of(st.floats(0, 4000), st.integers(0, 10_000), st.text(max_size=5), _ENCRYPTION),
    max_size=3,
)
_PLAUSIBLE = st.tuples(
    st.fixed_dictionaries(
        {"url": st.just(TEAM_URL), "allowedBranches": st.just(["main", "feature/*"])},
        optional={"pipeline": st.one_of(_TUNABLE, _PIPELINE), "secretRef": st.just({"name": "creds"})},
    ),
    st.fixed_dictionaries(
        {
            "providerRef": st.just({"name": "repo"}),
            "branch": st.sampled_from(["main", "feature/x", "feature/x/y"]),
            "path": st.sampled_from(["team-a", "team-a/apps", "clusters", "."]),
        },
        optional={"pipeline": st.one_of(_TUNABLE, _PIPELINE), "encryption": _VALUE},
    ),
)
_ANY = st.lists(
    st.tuples(
        st.sampled_from([Kind.GIT_PROVIDER, Kind.GIT_TARGET, Kind.WATCH_RULE]),
        st.sampled_from(["repo", "apps", "other"]),
    ).flatmap(lambda kind_name: _SPECS[kind_name[0]].map(lambda spec: (kind_name[0], kind_name[1], spec))),
    max_size=4,
)
_OBJECTS = st.tuples(_PLAUSIBLE, _ANY).map(
    lambda drawn: [
        (Kind.GIT_PROVIDER, "repo", drawn[0][0]),
        (Kind.GIT_TARGET, "apps", drawn[0][1]),
        *drawn[1],
    ]
)


def _reaching_outside(namespace: str, settings: dict[str, Any], path: str = "") -> list[str]:
    """Independently of the compiler: every field of dumped settings naming an environment variable
    (but the platform's digest key default), a file, another namespace or an escape hatch."""
    found: list[str] = []
    for key, value in settings.items():
        where = f"{path}{key}"
        if isinstance(value, dict):
            if "namespace" in value and value["namespace"] != namespace:
                found.append(where)
            found += _reaching_outside(namespace, value, f"{where}.")
        elif value is not None and value is not False:
            platform_default = where == "encryption.digest_key_env" and value == DEFAULT_DIGEST_KEY_ENV
            names_variable = key.endswith("_env") and not platform_default
            names_file = key.endswith(("_file", "_home")) or key == "sops_config"
            if names_variable or names_file or key.startswith("allow_"):
                found.append(where)
    return found


@settings(
    max_examples=300, suppress_health_check=[*TIMING_CHECKS, HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(_OBJECTS)
def test_no_tenant_object_raises_overruns_its_budget_or_reaches_outside(
    objects: list[tuple[Kind, str, dict[str, Any]]],
) -> None:
    resources = [CustomResource(ObjectRef(kind, TEAM, name), spec) for kind, name, spec in objects]
    limits = CompileLimits()
    compiled = compile_resources(resources, home_namespace=HOME, base=TENANTS, limits=limits)
    assert compiled.steps <= limits.object_steps * max(1, len(compiled.reports))
    for provider in compiled.providers:
        assert _reaching_outside(TEAM, provider.model_dump(mode="json")) == [], provider
    for target in compiled.targets:
        assert _reaching_outside(TEAM, target.model_dump(mode="json", exclude={"rules"})) == [], target
        assert target.path == "." or target.path.startswith(TEAM)
    for ref, report in compiled.reports.items():
        assert len(report.errors) <= limits.reported_errors + 1, ref
        assert ref.namespace == TEAM


@settings(max_examples=150, suppress_health_check=[*TIMING_CHECKS, HealthCheck.data_too_large])
@given(_OBJECTS, st.sampled_from([HOME, TEAM, "other-team"]))
def test_no_object_of_any_namespace_makes_the_compile_raise(
    objects: list[tuple[Kind, str, dict[str, Any]]], namespace: str
) -> None:
    """The platform's own objects are trusted with every field, but not to be well-formed."""
    resources = [CustomResource(ObjectRef(kind, namespace, name), spec) for kind, name, spec in objects]
    compiled = compile_resources(resources, home_namespace=HOME, base=TENANTS)
    assert set(compiled.reports) == {r.ref for r in resources}
    if namespace == "other-team":
        assert compiled.providers == [], "no grant, no provider"
