"""Builds the Ascend C kernels against the CPU twin (ascendc/twin) and drives them via ctypes."""
