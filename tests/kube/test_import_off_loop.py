"""kubernetes-asyncio is imported off the event loop when the first client is opened.

Its import (every generated model, 0.3-0.5 s) held the loop while the watch stage started
(pipeline/kube/client.py). In a fresh interpreter, where nothing imported it yet, a meta path
finder notes which thread imports `kubernetes_asyncio.client` while `open_client` and
`api_client_from_dict` run on the loop; no clock is involved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "c",
}


@pytest.mark.parametrize("factory", ["open_client", "api_client_from_dict"])
def test_the_first_client_imports_kubernetes_asyncio_off_the_loop_thread(
    tmp_path: Path, factory: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(KUBECONFIG))
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys, threading
        from pathlib import Path
        from pipeline.config import ClusterSettings
        from pipeline.kube import client

        importers = []

        class Importers:
            def find_spec(self, name, path=None, target=None):
                if name == "kubernetes_asyncio.client":
                    importers.append(threading.current_thread() is threading.main_thread())
                return None

        async def main():
            path = Path({str(kubeconfig)!r})
            if {factory!r} == "open_client":
                opened = await client.open_client(ClusterSettings(name="c", kubeconfig=path))
                await opened.close()
            else:
                api = await client.api_client_from_dict(json.loads(path.read_text()))
                await api.close()

        print("kubernetes_asyncio.client" in sys.modules)
        sys.meta_path.insert(0, Importers())
        asyncio.run(main())
        print(importers)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    imported_before, importers = done.stdout.splitlines()
    assert imported_before == "False"
    # imported once, on a thread other than the loop's (the main thread runs the loop)
    assert importers == "[False]"
