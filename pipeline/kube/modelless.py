"""kubernetes-asyncio's connection parts, loaded without its generated API and model classes.

The package's `__init__` imports every generated API and model class: about 33 MiB of memory for
the life of the process and 0.2-0.4 s of import, for classes the pipeline never uses (its requests
are raw and untyped: pipeline/kube/client.py). What it does use, `Configuration`, `ApiClient`,
`ApiException` and the kubeconfig and in-cluster loaders, live in submodules that need none of
them.

So `load()` registers `kubernetes_asyncio`, `kubernetes_asyncio.client` and its `models` package as
shells: package modules whose `__init__` has not run, from which submodules import as usual. A
shell runs its package's own `__init__` the first time it is asked for a name it does not hold
that is not a submodule (another user of the package in the same process, such as a test's
`client.CoreV1Api`, or a typed response's `models.V1Pod`), so nothing else in the process can tell
the difference. When the package was imported in full before, `load()` uses it as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient, Configuration
    from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["ConnectionParts", "load", "loaded"]

_ROOT = "kubernetes_asyncio"
_CLIENT = "kubernetes_asyncio.client"
#: Shells, outermost first: each one's parent must be in sys.modules before it is found.
_SHELLS = (_ROOT, _CLIENT, "kubernetes_asyncio.client.models")

#: Held while shells are made or completed; reentrant, since completing one may import through another.
_loading = threading.RLock()


@dataclass(frozen=True, slots=True)
class ConnectionParts:
    """What the client factories use of kubernetes-asyncio."""

    api_client: type[ApiClient]
    configuration: type[Configuration]
    api_exception: type[ApiException]
    config: ModuleType  # kubernetes_asyncio.config: kubeconfig and in-cluster loading


_parts: ConnectionParts | None = None


def loaded() -> ConnectionParts | None:
    """The connection parts once `load` imported them; never imports."""
    return _parts


def load() -> ConnectionParts:
    """The connection parts, importing them (and only them) the first time.

    Imports run here, so a caller on the event loop calls this in a worker thread
    (`asyncio.to_thread`) unless `loaded` has them; concurrent first calls import once.
    """
    global _parts
    with _loading:
        if _parts is not None:
            return _parts
        if _CLIENT not in sys.modules:
            for name in _SHELLS:
                _register_shell(name)
        client = sys.modules[_CLIENT]
        if "ApiClient" not in vars(client):
            # The loaders import these two from the client package: a shell holding them is not
            # completed by that import.
            configuration = importlib.import_module(f"{_CLIENT}.configuration")
            api_client = importlib.import_module(f"{_CLIENT}.api_client")
            setattr(client, "Configuration", configuration.Configuration)  # noqa: B010
            setattr(client, "ApiClient", api_client.ApiClient)  # noqa: B010
        exceptions = importlib.import_module(f"{_CLIENT}.exceptions")
        config = importlib.import_module(f"{_ROOT}.config")
        _parts = ConnectionParts(
            vars(client)["ApiClient"], vars(client)["Configuration"], exceptions.ApiException, config
        )
        return _parts


def _register_shell(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an importable package", name=name)
    loader = spec.loader
    shell = importlib.util.module_from_spec(spec)

    def complete(attribute: str) -> Any:
        """A name the shell does not hold: a submodule imports alone; anything else runs `__init__`."""
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        with _loading:
            if vars(shell).get("__getattr__") is complete:
                del shell.__getattr__
                loader.exec_module(shell)
        try:
            return vars(shell)[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    shell.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules[name] = shell
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, shell)
