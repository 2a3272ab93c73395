"""verl's `verl.plugins` entry point for ReCo (pyproject.toml): verl runs it on `import verl`, in every process.

It imports nothing of verl and patches nothing. It only arranges that the plugin, reco_scaled.integrations.verl,
is imported right after verl's v1 trainer module (verl.trainer.ppo.v1.trainer_base), which registers the trainer
"reco" in the process that chooses the trainer. Processes that never import the v1 trainer (rollout servers, most
workers) never load the plugin, unless ReCo's loss is sent to them (then unpickling it imports the plugin).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
PLUGIN = "reco_scaled.integrations.verl"


class _Loader(importlib.abc.Loader):
    """verl's own loader of the trainer module, then the plugin."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        importlib.import_module(PLUGIN)


class _LoadPluginAfterTrainer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != TRAINER_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot; also lets the lookup below find verl's own spec
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if TRAINER_MODULE in sys.modules:
    importlib.import_module(PLUGIN)
elif not any(isinstance(finder, _LoadPluginAfterTrainer) for finder in sys.meta_path):
    sys.meta_path.insert(0, _LoadPluginAfterTrainer())
