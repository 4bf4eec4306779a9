"""kubernetes-asyncio's connection parts load without its generated classes, and the package stays whole.

Each case runs in a fresh interpreter: what a process imported first decides what `load` finds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Modules the package's __init__ files import and the connection parts never need.
GENERATED = ("kubernetes_asyncio.client.models.v1_config_map", "kubernetes_asyncio.client.api.core_v1_api")


def run(script: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_connection_parts_load_without_a_generated_class() -> None:
    found = run(
        f"""
        import asyncio, json, sys
        from pipeline.kube import modelless
        parts = modelless.load()
        configuration = parts.configuration()
        configuration.host = "https://example.invalid:6443"

        async def opened():
            api = parts.api_client(configuration=configuration)
            await api.close()
            return api

        api = asyncio.run(opened())
        print(json.dumps({{
            "generated": [name for name in {GENERATED!r} if name in sys.modules],
            "modules": sum(name.startswith("kubernetes_asyncio") for name in sys.modules),
            "exception": parts.api_exception.__name__,
            "loaders": [hasattr(parts.config, n) for n in ("load_kube_config", "load_incluster_config")],
            "host": api.configuration.host,
            "same": modelless.load() is parts,
        }}))
        """
    )
    assert found["generated"] == []
    assert isinstance(found["modules"], int)
    assert found["modules"] < 60  # the package has about 1,200
    assert found["exception"] == "ApiException"
    assert found["loaders"] == [True, True]
    assert found["host"] == "https://example.invalid:6443"
    assert found["same"] is True


def test_the_package_is_whole_for_whoever_uses_it_after_the_parts_loaded() -> None:
    """A test's `client.CoreV1Api`, a typed response's model class, `watch.Watch`: each completes
    the shell it asks, and gets the package's own classes."""
    found = run(
        """
        import asyncio, json, sys
        from pipeline.kube import modelless
        parts = modelless.load()
        from kubernetes_asyncio import client
        import kubernetes_asyncio
        core = client.CoreV1Api

        async def deserialized():
            api = parts.api_client()
            try:
                body = {"metadata": {"name": "cm"}, "data": {"k": "v"}}
                return api._ApiClient__deserialize(body, "V1ConfigMap")
            finally:
                await api.close()

        typed = asyncio.run(deserialized())
        print(json.dumps({
            "core": core.__module__,
            "same_client": (
                client.ApiClient is parts.api_client and client.Configuration is parts.configuration
            ),
            "typed": [type(typed).__name__, typed.metadata.name, typed.data],
            "model": client.models.V1ConfigMap is type(typed),
            "watch": kubernetes_asyncio.watch.Watch.__module__,
            "missing": hasattr(client, "NoSuchThing"),
        }))
        """
    )
    assert found["core"] == "kubernetes_asyncio.client.api.core_v1_api"
    assert found["same_client"] is True
    assert found["typed"] == ["V1ConfigMap", "cm", {"k": "v"}]
    assert found["model"] is True
    assert found["watch"] == "kubernetes_asyncio.watch.watch"
    assert found["missing"] is False


def test_a_package_imported_in_full_first_is_used_as_it_is() -> None:
    found = run(
        """
        import json
        import kubernetes_asyncio.client as client
        from pipeline.kube import modelless
        parts = modelless.load()
        same = parts.api_client is client.ApiClient and parts.configuration is client.Configuration
        print(json.dumps({"same": same}))
        """
    )
    assert found["same"] is True


@pytest.mark.parametrize("threads", [2, 8])
def test_concurrent_first_loads_import_once(threads: int) -> None:
    found = run(
        f"""
        import json, threading
        from pipeline.kube import modelless
        got = []
        start = threading.Barrier({threads})
        def first():
            start.wait()
            got.append(modelless.load())
        workers = [threading.Thread(target=first) for _ in range({threads})]
        for w in workers: w.start()
        for w in workers: w.join()
        print(json.dumps({{"distinct": len({{id(p) for p in got}}), "count": len(got)}}))
        """
    )
    assert found == {"distinct": 1, "count": threads}
