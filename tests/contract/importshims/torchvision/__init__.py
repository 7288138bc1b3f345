"""Import-only stand-in for torchvision, for the SGLang contract tests on a CPU machine.

sglang.bench_serving imports sglang.srt.configs, which imports image-model configs that
`import torchvision.transforms` at module level (and transformers' processors import
torchvision.io). torchvision's PyPI wheel is built against CUDA torch (its _C needs
libc10_cuda.so) and its CPU build is not reachable from here, so the real package cannot be
imported next to the venv's CPU torch. Text benchmarks never call it: any attribute of any
torchvision submodule raises when used, so a contract test can never pass through it.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Unavailable:
    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stand-in: {self._name} is not available in the contract tests")

    def __getattr__(self, attr: str) -> "_Unavailable":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):  # `class X(T.Something)` at import time
        return (object,)


def _module_getattr(module_name: str):
    def __getattr__(name: str) -> _Unavailable:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{module_name}.{name}")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__dict__["__getattr__"] = _module_getattr(spec.name)  # PEP 562: a module's __getattr__
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
__version__ = "0.28.0"  # the release matching the venv's torch 2.13
__getattr__ = _module_getattr("torchvision")
