"""The node-local checker's parts; ``gpuforge.validator.nodelocal`` is its entry point."""
