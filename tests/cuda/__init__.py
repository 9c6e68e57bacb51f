"""The CUDA group: tests that need a CUDA device (run by ``benchmarks/gpu.sh``)."""
