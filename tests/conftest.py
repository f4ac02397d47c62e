pytest_plugins = ["gpuforge.lab.pytest_plugin"]
