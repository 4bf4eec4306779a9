"""Configuration mistakes an operator makes get one clear line naming the field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_settings


def load(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    load_settings(config, environ={})


def test_duplicate_audit_routes_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"audit\.routes: .*duplicate audit route names: a, b"):
        load(tmp_path, "audit: {routes: [{name: b}, {name: a}, {name: b}, {name: a}, {name: c}]}\n")


def test_duplicate_targets_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"targets: .*duplicate target names: t1$"):
        load(
            tmp_path,
            "providers: [{name: git, url: /srv/git}]\n"
            "targets: [{name: t1, provider: git}, {name: t1, provider: git}, {name: t2, provider: git}]\n",
        )


def test_distinct_names_load(tmp_path: Path) -> None:
    load(
        tmp_path,
        "audit: {routes: [{name: a}, {name: b}]}\n"
        "providers: [{name: git, url: /srv/git}]\n"
        "targets: [{name: t1, provider: git, path: a}, {name: t2, provider: git, path: b}]\n",
    )


def test_compression_is_one_of_the_kafka_codecs(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("log: {compression: lz4}\n", encoding="utf-8")
    assert load_settings(config, environ={}).log.compression == "lz4"
    assert load_settings(None, environ={}).log.compression == "zstd"
    with pytest.raises(ConfigError, match=r"log\.compression: .*'lz4' or 'zstd'"):
        load(tmp_path, "log: {compression: brotli}\n")
    with pytest.raises(ConfigError, match=r"REVERSER_LOG__COMPRESSION") as from_env:
        load_settings(None, environ={"REVERSER_LOG__COMPRESSION": "xz"})
    assert "xz" not in str(from_env.value)


@pytest.mark.parametrize(
    ("section", "addr"), [("audit", "9444"), ("metrics", "localhost:http"), ("audit", "h:70000")]
)
def test_a_listen_address_that_is_not_host_port_is_named(tmp_path: Path, section: str, addr: str) -> None:
    with pytest.raises(ConfigError, match=rf"{section}\.addr: .*is not HOST:PORT"):
        load(tmp_path, f"{section}: {{addr: '{addr}'}}\n")


def test_listen_addresses_split_into_host_and_port() -> None:
    from pipeline.config import split_host_port

    assert split_host_port("127.0.0.1:9444") == ("127.0.0.1", 9444)
    assert split_host_port("[::1]:0") == ("::1", 0)
    assert split_host_port(":9464") == ("0.0.0.0", 9464)


def _target(extra: str) -> str:
    return f"providers: [{{name: git, url: /srv/git}}]\ntargets: [{{name: t1, provider: git, {extra}}}]\n"


@pytest.mark.parametrize(
    ("placement", "named"),
    [
        (
            "{default: '{nmespace}/{name}.yaml'}",
            r"targets\.0\.placement: .*default: unknown variable \{nmespace\}",
        ),
        (
            "{by_type: {v1/configmaps: '../{name}.yaml'}}",
            r"targets\.0\.placement: .*by_type\[v1/configmaps\]: .* leaves the target folder",
        ),
        (
            "{by_type: {v1/configmaps: '/etc/{name}.yaml'}}",
            r"by_type\[v1/configmaps\]: a template is a relative",
        ),
        (
            "{default: 'all.yaml'}",
            r"default: 'all\.yaml' bundles objects.*add a by_type entry for v1/secrets",
        ),
        ("{by_type: {configmaps: '{name}.yaml'}}", r"by_type: 'configmaps' is not group/version/resource"),
    ],
)
def test_a_placement_template_is_checked_when_the_configuration_loads(
    tmp_path: Path, placement: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load(tmp_path, _target(f"placement: {placement}"))


def test_a_placement_is_compiled_on_the_target_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(_target("placement: {by_type: {v1/configmaps: '{namespace}/{name}.yaml'}}"))
    target = load_settings(config, environ={}).targets[0]
    assert set(target.placement_policy.by_type) == {"v1/configmaps"}
    assert target.placement_policy.default is None
    assert target.kustomize.render == "off"
    config.write_text(_target("kustomize: {render: on, binary: /opt/kustomize, timeout_s: 5}"))
    target = load_settings(config, environ={}).targets[0]
    assert (target.kustomize.render, target.kustomize.binary, target.kustomize.timeout_s) == (
        "on",
        "/opt/kustomize",
        5,
    )
    assert target.placement_policy.by_type == {}


def test_kustomize_render_is_on_or_off(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"targets\.0\.kustomize\.render"):
        load(tmp_path, _target("kustomize: {render: always}"))


@pytest.mark.parametrize(
    ("clusters", "message"),
    [
        (
            "[{name: a, in_cluster: true}, "
            "{name: b, in_cluster: true, kubeconfig_secret: {namespace: r, name: k}}]",
            r"clusters\.1: .*kubeconfig_secret and in_cluster are exclusive",
        ),
        (
            "[{name: a, in_cluster: true}, "
            "{name: b, context: x, kubeconfig_secret: {namespace: r, name: k}}]",
            r"clusters\.1: .*context applies to a kubeconfig file",
        ),
        (
            "[{name: a, in_cluster: true}, {name: b, kubeconfig_secret: {namespace: r, name: k, key: ''}}]",
            r"clusters\.1\.kubeconfig_secret\.key: ",
        ),
        (
            "[{name: a, kubeconfig_secret: {namespace: r, name: k}}]",
            r"clusters\.a\.kubeconfig_secret: this cluster holds the Secrets",
        ),
    ],
)
def test_kubeconfig_secret_mistakes_are_named(tmp_path: Path, clusters: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, f"clusters: {clusters}\n")


def test_a_kubeconfig_secret_cluster_loads(tmp_path: Path) -> None:
    load(
        tmp_path,
        "clusters: [{name: a, in_cluster: true}, {name: b, kubeconfig_secret: {namespace: r, name: k}}]\n",
    )


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_snapshot_part_size_below_one_object_is_named(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"providers\.0\.snapshot_part_objects: "):
        load(tmp_path, f"providers: [{{name: git, url: /srv/git, snapshot_part_objects: {value}}}]\n")


def test_the_snapshot_part_size_defaults_to_two_thousand_five_hundred_objects(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("providers: [{name: git, url: /srv/git, snapshot_part_objects: 1}]\n", encoding="utf-8")
    assert load_settings(config, environ={}).providers[0].snapshot_part_objects == 1
    config.write_text("providers: [{name: git, url: /srv/git}]\n", encoding="utf-8")
    assert load_settings(config, environ={}).providers[0].snapshot_part_objects == 2_500
