"""The jinja2 templates of every file a node gets; shipped inside the wheel as ``gpuforge.templates``."""
