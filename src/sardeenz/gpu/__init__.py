"""GPUs: inventory (NVML or simulated), placement, memory budget, kvcached.

Pure, typed building blocks; the supervisor and the API wire them together.
"""
