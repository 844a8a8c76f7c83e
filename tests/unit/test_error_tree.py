"""One error hierarchy: every exception class of the package derives from
``LlogError`` and is named in the tree of ``server/_errors.py``'s docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import server
from server import _errors
from server._errors import LlogError


def _server_modules():
    for info in pkgutil.walk_packages(server.__path__, "server."):
        if info.name.startswith("server.spark.") or info.name == "server.spark":
            try:
                yield importlib.import_module(info.name)
            except ImportError:  # pyspark or pyarrow missing: those modules cannot define errors we use
                continue
        else:
            yield importlib.import_module(info.name)


def exception_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in _server_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_class_derives_from_llog_error():
    strays = {name for name, cls in exception_classes().items() if not issubclass(cls, LlogError)}
    assert strays == set(), f"exception classes outside the LlogError tree: {sorted(strays)}"


def test_every_exception_class_is_in_the_documented_tree():
    tree = _errors.__doc__ or ""
    missing = {name for name, cls in exception_classes().items() if cls.__name__ not in tree}
    assert missing == set(), f"add these to the tree in server/_errors.py: {sorted(missing)}"
