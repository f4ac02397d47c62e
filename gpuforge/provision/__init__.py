"""Network boot of the nodes from the control host (``gpuforge provision``): the plan and the files."""
