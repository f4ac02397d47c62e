"""One module per stack layer; the role -> layer table is ``gpuforge.spec.roles``."""

from __future__ import annotations

from collections.abc import Callable


def load_deploy(name: str) -> Callable[[], None]:
    """The deploy function of the layer ``gpuforge/deploy/layers/<name>.py``."""
    module = __import__(f"gpuforge.deploy.layers.{name}", fromlist=[name])
    fn: Callable[[], None] = getattr(module, name)
    return fn
