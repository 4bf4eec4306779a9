"""Configuration that could leak a secret or destroy data is refused, naming the field or variable.

Environment overrides of string fields are taken verbatim (12.6); branch names, remote URLs and
target paths that git or the worker would misuse are refused at load (12.8); Basic credentials
over plain http:// need an explicit opt-in (12.7).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import ConfigError, load_settings
from pipeline.gitnames import GitNameError, check_branch_name, check_remote_url, normalize_target_path
from tests.support.hypothesis_profile import TIMING_CHECKS

AWKWARD_SECRETS = ["*alias", "%TAG", "{unclosed", "NO", "0x1F", "pass #word", "~", "null", "1e3", "'q'", "[a"]


def load(tmp_path: Path, text: str) -> object:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    return load_settings(config, environ={})


def load_targets(tmp_path: Path, providers: list[dict[str, Any]], targets: list[dict[str, Any]]) -> object:
    return load(tmp_path, yaml.safe_dump({"providers": providers, "targets": targets}))


GIT = {"name": "git", "url": "/srv/g"}
FIXTURE_CHECKS = [*TIMING_CHECKS, HealthCheck.function_scoped_fixture]


# --- 12.6 environment overrides ------------------------------------------------------------------


@pytest.mark.parametrize("secret", AWKWARD_SECRETS)
def test_string_fields_take_environment_values_verbatim(secret: str) -> None:
    loaded = load_settings(
        None,
        environ={
            "REVERSER_LOG__SASL__PASSWORD": secret,
            "REVERSER_LOG__SASL__USERNAME": secret,
            "REVERSER_LOG__CLIENT_ID": secret,
        },
    )
    assert loaded.log.sasl.password.get_secret_value() == secret
    assert loaded.log.sasl.username == secret
    assert loaded.log.client_id == secret


def test_non_string_fields_are_still_parsed() -> None:
    loaded = load_settings(
        None,
        environ={
            "REVERSER_ATTRIBUTION__GRACE_MS": "5000",
            "REVERSER_AUDIT__ROUTES": "[{name: a, allowed_identities: [apiserver]}]",
            "REVERSER_AUDIT__ALLOW_PLAIN_HTTP": "true",
            "REVERSER_WORKDIR": "/var/lib/x",
        },
    )
    assert loaded.attribution.grace_ms == 5000
    assert loaded.audit.routes[0].allowed_identities == ["apiserver"]
    assert loaded.audit.allow_plain_http is True
    assert str(loaded.workdir) == "/var/lib/x"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REVERSER_ATTRIBUTION__GRACE_MS", "{not yaml s3cr3t-value"),
        ("REVERSER_ATTRIBUTION__GRACE_MS", "s3cr3t-value"),
        ("REVERSER_LOG__SECURITY_PROTOCOL", "s3cr3t-value"),
        ("REVERSER_AUDIT__ROUTES", "[{name: s3cr3t-value, bogus: 1}]"),
    ],
)
def test_a_bad_environment_value_is_named_by_its_variable_never_shown(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, environ={variable: value})
    assert variable in str(caught.value)
    assert "s3cr3t-value" not in str(caught.value)


def test_the_sasl_password_is_never_printed() -> None:
    loaded = load_settings(None, environ={"REVERSER_LOG__SASL__PASSWORD": "hunter2-topsecret"})
    for text in (repr(loaded), str(loaded), repr(loaded.log.sasl), loaded.model_dump_json()):
        assert "hunter2-topsecret" not in text


def test_reverser_run_names_the_variable_not_the_secret(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "REVERSER_LOG__SASL__PASSWORD": "hunter2-topsecret",
        "REVERSER_ATTRIBUTION__GRACE_MS": "hunter2-topsecret",
    }
    result = subprocess.run(
        [str(Path(".venv/bin/reverser").resolve()), "run", "--workdir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "REVERSER_ATTRIBUTION__GRACE_MS" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


# --- 12.8 config that would destroy data -----------------------------------------------------------


@pytest.mark.parametrize(
    "branch", ["-f", "HEAD", "a..b", "a b", "x.lock", "a/.b", "a//b", "@{-1}", "a:b", "é\x01"]
)
def test_branch_names_git_rejects_are_refused(tmp_path: Path, branch: str) -> None:
    with pytest.raises(ConfigError, match=r"targets\.0\.branch"):
        load_targets(tmp_path, [GIT], [{"name": "t", "provider": "git", "branch": branch}])
    with pytest.raises(ConfigError, match=r"providers\.0\.default_branch"):
        load_targets(tmp_path, [{**GIT, "default_branch": branch}], [])


_REF_CHARS = st.sampled_from([*"ab-._/@{}~^:?*[\\ \t#é", "lock", "HEAD"])


@settings(max_examples=300, deadline=None, suppress_health_check=FIXTURE_CHECKS)
@given(st.lists(_REF_CHARS, min_size=1, max_size=8).map("".join))
def test_branch_rule_matches_git_check_ref_format(tmp_path: Path, name: str) -> None:
    git_accepts = (
        subprocess.run(
            ["git", "check-ref-format", "--branch", name], cwd=tmp_path, capture_output=True, check=False
        ).returncode
        == 0
    )
    try:
        check_branch_name(name)
        accepted = True
    except GitNameError:
        accepted = False
    assert accepted == git_accepts, name


@pytest.mark.parametrize(
    "url",
    [
        "--upload-pack=touch /tmp/pwned",
        "-oProxyCommand=x",
        "ext::sh -c touch% /tmp/pwned",
        "fd::3",
        "git://example.com/r.git",
        "ftp://example.com/r.git",
        "https://example.com/r.git\n",
        " https://example.com/r.git",
        "",
    ],
)
def test_unsafe_remote_urls_are_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(GitNameError):
        check_remote_url(url)
    with pytest.raises(ConfigError, match=r"providers\.0\.url"):
        load_targets(tmp_path, [{**GIT, "url": url}], [])


@pytest.mark.parametrize(
    "url",
    [
        "https://h/r.git",
        "HTTP://h/r",
        "ssh://git@h:2222/r.git",
        "git@h:r.git",
        "file:///srv/r.git",
        "/srv/r.git",
        "repos/r",
    ],
)
def test_safe_remote_urls_load(url: str) -> None:
    assert check_remote_url(url) == url


@pytest.mark.parametrize("path", [".git", "a/.git", "a/.GIT/b", "x/.Git", ".git./x", "a/\x00b"])
def test_target_paths_into_git_metadata_are_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(GitNameError):
        normalize_target_path(path)
    with pytest.raises(ConfigError, match=r"targets\.0\.path"):
        load_targets(tmp_path, [GIT], [{"name": "t", "provider": "git", "path": path}])


@pytest.mark.parametrize(
    ("first", "second"),
    [("a", "a"), ("a", "./a/"), ("a", "a/b"), (".", "x"), ("x/y/z", "x")],
)
def test_targets_sharing_a_folder_of_one_branch_are_refused(tmp_path: Path, first: str, second: str) -> None:
    targets = [
        {"name": "t1", "provider": "git", "path": first},
        {"name": "t2", "provider": "git", "path": second},
    ]
    with pytest.raises(ConfigError, match="targets t1 and t2 write overlapping paths"):
        load_targets(tmp_path, [GIT], targets)


def test_two_providers_on_one_url_are_one_repository(tmp_path: Path) -> None:
    providers = [{"name": "g1", "url": "/srv/g"}, {"name": "g2", "url": "/srv/g/"}]
    targets = [
        {"name": "t1", "provider": "g1", "path": "a"},
        {"name": "t2", "provider": "g2", "path": "a/b", "branch": "main"},
    ]
    with pytest.raises(ConfigError, match="overlapping paths"):
        load_targets(tmp_path, providers, targets)


def test_separate_folders_branches_and_repositories_load(tmp_path: Path) -> None:
    load(
        tmp_path,
        "providers: [{name: g1, url: /srv/g}, {name: g2, url: /srv/h}]\n"
        "targets: [{name: t1, provider: g1, path: a}, {name: t2, provider: g1, path: ab},\n"
        "          {name: t3, provider: g1, path: a, branch: other}, {name: t4, provider: g2, path: a}]\n",
    )


# --- 12.7 Basic credentials over plain http -------------------------------------------------------


def test_basic_credentials_over_plain_http_need_an_explicit_opt_in(tmp_path: Path) -> None:
    provider = "{name: git, url: 'http://git.example.com/r.git', password_env: GIT_PASSWORD"
    with pytest.raises(ConfigError, match="refusing to send Basic credentials over plain http"):
        load(tmp_path, f"providers: [{provider}}}]\n")
    load(tmp_path, f"providers: [{provider}, allow_plain_http_credentials: true}}]\n")
    load(tmp_path, "providers: [{name: git, url: 'https://git.example.com/r.git', password_env: P}]\n")
    load(tmp_path, "providers: [{name: git, url: 'http://git.example.com/r.git'}]\n")


# --- issue 27, 8b: a password in the remote URL ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://user:hunter2@git.example.com/r.git",
        "http://user:hunter2@git.example.com/r.git",
        "ssh://git:hunter2@git.example.com/r.git",
        "https://:hunter2@git.example.com/r.git",
        "https://user:@git.example.com/r.git",
    ],
)
def test_a_password_in_the_remote_url_is_refused_without_showing_it(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError, match=r"providers\.0\.url: .*carries a password") as refused:
        load_targets(tmp_path, [{**GIT, "url": url}], [])
    assert "hunter2" not in str(refused.value)
    assert url not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["ssh://git@git.example.com/r.git", "https://user@git.example.com/r.git", "git@h:r.git"]
)
def test_a_user_name_without_a_password_is_fine(tmp_path: Path, url: str) -> None:
    load_targets(tmp_path, [{**GIT, "url": url}], [])
