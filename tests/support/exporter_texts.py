"""dcgm-exporter pages as real exporters print them, for the scrape tests (sources named)."""

# dcgm-exporter 3.x on V100s (NVIDIA/dcgm-exporter#250): no pci_bus_id label.
V100 = """# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",device="nvidia0",modelName="Tesla V100-SXM2-32GB",Hostname="r6i3n0"} 135
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5",device="nvidia1",modelName="Tesla V100-SXM2-32GB",Hostname="r6i3n0"} 135
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",device="nvidia0",modelName="Tesla V100-SXM2-32GB",Hostname="r6i3n0"} 33
"""
