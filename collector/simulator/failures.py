"""The failure taxonomy of Acme (NSDI'24): what can end a run, and what it leaves behind.

Each reason has a category (infrastructure, framework, script), a log tail that goes in
the run's ``reason`` column, the XID codes the GPU driver logs for it (infrastructure
faults of the GPU itself), and whether the node is taken down for repair.
"""

from __future__ import annotations

from dataclasses import dataclass

INFRA, FRAMEWORK, SCRIPT = "infrastructure", "framework", "script"


@dataclass(frozen=True)
class Reason:
    category: str
    name: str
    log: str  # the log tail, formatted with node= and gpu=
    xids: tuple[int, ...] = ()  # XIDs on the faulty GPU, first is the main one
    repair: bool = False  # node drained and repaired afterwards
    node_fail: bool = False  # Slurm shows NODE_FAIL instead of FAILED
    weight: float = 1.0  # relative frequency within its draw


# Hardware faults: drawn at a rate per node-day, so they hit the long multi-node runs.
HARDWARE = (
    Reason(INFRA, "NVLink error",
           "RuntimeError: NCCL error: unhandled cuda error, NVLink fatal error on {node} GPU {gpu}"
           " (Xid 74)", (74,), repair=True, weight=0.16),
    Reason(INFRA, "CUDA error",
           "RuntimeError: CUDA error: unspecified launch failure on {node} GPU {gpu}"
           " (GSP RPC timeout, Xid 119)", (119,), repair=True, weight=0.16),
    Reason(INFRA, "node failure",
           "slurmstepd: error: *** JOB CANCELLED DUE TO NODE FAILURE ON {node} ***"
           " (GPU {gpu} has fallen off the bus, Xid 79)", (79,), repair=True, node_fail=True,
           weight=0.14),
    Reason(INFRA, "ECC error",
           "RuntimeError: CUDA error: uncorrectable ECC error encountered on {node} GPU {gpu}"
           " (Xid 48)", (48, 63), repair=True, weight=0.10),
    Reason(INFRA, "ECC error",
           "RuntimeError: CUDA error: uncorrectable ECC error encountered on {node} GPU {gpu}"
           " (contained, Xid 94)", (94, 64), repair=True, weight=0.04),
)
# Network and storage faults: no XID. Like hardware faults they arrive at the configured
# rate per node-day (SimConfig.infra_failures_per_1000_node_days), so the fleet's measured
# r_f matches the configured one.
NETWORK = (
    Reason(INFRA, "NCCL timeout",
           "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE)"
           " ran for 1800000 milliseconds before timing out ({node})", weight=0.16),
    Reason(INFRA, "NCCL remote error",
           "NCCL WARN NET/IB : Got completion from peer {node} with error 12, opcode 0,"
           " len 0, vendor err 129 (remote process exited)", weight=0.08),
    Reason(INFRA, "network error",
           "NCCL WARN NET/IB : mlx5_0:1 port error: link down on {node}", weight=0.06),
    Reason(INFRA, "connection error",
           "ConnectionError: [Errno 111] Connection refused (rendezvous store on {node})",
           weight=0.05),
    Reason(INFRA, "S3/storage error",
           "botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL:"
           " \"http://s3.cluster.local/ckpt\" ({node})", weight=0.05),
)
FRAMEWORK_REASONS = (
    Reason(FRAMEWORK, "dataloader killed",
           "RuntimeError: DataLoader worker (pid 41234) is killed by signal: Killed.", weight=3),
    Reason(FRAMEWORK, "out of memory",
           "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
           " (GPU {gpu}; 79.11 GiB total capacity)", weight=4),
    Reason(FRAMEWORK, "runtime error",
           "RuntimeError: CUDA error: an illegal memory access was encountered", (31,),
           weight=1),
    Reason(FRAMEWORK, "runtime error",
           "RuntimeError: Expected all tensors to be on the same device, but found at least"
           " two devices, cuda:0 and cpu!", weight=2),
    Reason(FRAMEWORK, "assertion error", "AssertionError: loss is nan", weight=1),
    Reason(FRAMEWORK, "value error",
           "ValueError: Expected input batch_size (16) to match target batch_size (8).",
           weight=1),
    Reason(FRAMEWORK, "model loading error",
           "OSError: Unable to load weights from pytorch checkpoint file", weight=1),
    Reason(FRAMEWORK, "dataset loading error",
           "datasets.builder.DatasetGenerationError: An error occurred while generating the"
           " dataset", weight=1),
)
SCRIPT_REASONS = (
    Reason(SCRIPT, "file not found",
           "FileNotFoundError: [Errno 2] No such file or directory: 'configs/model.yaml'",
           weight=3),
    Reason(SCRIPT, "OS error", "OSError: [Errno 28] No space left on device", weight=1),
    Reason(SCRIPT, "type error",
           "TypeError: forward() got an unexpected keyword argument 'attention_mask'", weight=2),
    Reason(SCRIPT, "key error", "KeyError: 'input_ids'", weight=2),
    Reason(SCRIPT, "attribute error",
           "AttributeError: 'NoneType' object has no attribute 'size'", weight=2),
    Reason(SCRIPT, "import error",
           "ImportError: cannot import name 'flash_attn_func' from 'flash_attn'", weight=2),
    Reason(SCRIPT, "name error", "NameError: name 'tokenizer' is not defined", weight=1),
    Reason(SCRIPT, "syntax error", "SyntaxError: invalid syntax (train.py, line 212)", weight=1),
    Reason(SCRIPT, "permission error",
           "PermissionError: [Errno 13] Permission denied: '/mnt/shared/ckpt'", weight=1),
)
INFRA_REASONS = HARDWARE + NETWORK
COLLECTIVE = NETWORK[:3]  # errors of a running multi-node job's collectives and links
STARTUP = NETWORK[3:]  # rendezvous and storage errors, mostly as a job starts

# Unexpected interruptions of Llama 3 405B pre-training on 16,384 H100s over 54 days
# (Llama Team, "The Llama 3 Herd of Models", 2024, Table 5: 419 interruptions), weighted
# by their counts, with the XIDs each cause leaves (NVIDIA's XID catalogue): a faulty GPU
# falls off the bus (79), loses an NVLink (74) or halts its microcontroller (62); HBM3
# and SRAM errors are double-bit ECC errors with row remapping (48, 63, 64) or contained
# and uncontained ECC errors (94, 95); the GPU System Processor times out (119, 120);
# software bugs show application XIDs (13, 31, 43). Host and network causes leave none.
_GPU = "{node} GPU {gpu}"
LLAMA3_H100 = (
    Reason(INFRA, "faulty GPU", "slurmstepd: error: *** JOB CANCELLED DUE TO NODE FAILURE ON"
           " {node} *** (GPU {gpu} has fallen off the bus, Xid 79)", (79,), repair=True,
           node_fail=True, weight=148 * 0.6),
    Reason(INFRA, "faulty GPU", "RuntimeError: NCCL error: unhandled cuda error, NVLink fatal"
           f" error on {_GPU} (Xid 74)", (74,), repair=True, weight=148 * 0.25),
    Reason(INFRA, "faulty GPU", f"RuntimeError: CUDA error: unknown error on {_GPU}"
           " (internal micro-controller halt, Xid 62)", (62,), repair=True, weight=148 * 0.15),
    Reason(INFRA, "GPU HBM3 memory", "RuntimeError: CUDA error: uncorrectable ECC error"
           f" encountered on {_GPU} (HBM3, Xid 48; row remap pending)", (48, 63), repair=True,
           weight=72 * 0.5),
    Reason(INFRA, "GPU HBM3 memory", "RuntimeError: CUDA error: uncorrectable ECC error"
           f" encountered on {_GPU} (HBM3, Xid 48; row remapping failed)", (48, 64),
           repair=True, weight=72 * 0.2),
    Reason(INFRA, "GPU HBM3 memory", "RuntimeError: CUDA error: uncorrectable ECC error"
           f" encountered on {_GPU} (HBM3, contained, Xid 94)", (94, 63), repair=True,
           weight=72 * 0.3),
    Reason(INFRA, "software bug", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275,"
           f" internal error, NCCL version 2.18.3 on {_GPU} (Xid 13)", (13,), weight=54 * 0.5),
    Reason(INFRA, "software bug", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275,"
           f" unhandled system error on {_GPU} (Xid 31, Xid 43)", (31, 43), weight=54 * 0.5),
    Reason(INFRA, "network switch/cable", "NCCL WARN NET/IB : mlx5_3:1 port error: link down"
           " on {node} (leaf switch port flapping)", weight=35),
    Reason(INFRA, "host maintenance", "slurmstepd: error: *** JOB CANCELLED DUE TO NODE"
           " FAILURE ON {node} *** (unplanned host maintenance)", node_fail=True, repair=True,
           weight=32),
    Reason(INFRA, "GPU SRAM memory", "RuntimeError: CUDA error: uncorrectable ECC error"
           f" encountered on {_GPU} (SRAM, uncontained, Xid 95)", (95,), repair=True,
           weight=19),
    Reason(INFRA, "GPU system processor", "RuntimeError: CUDA error: unspecified launch"
           f" failure on {_GPU} (GSP RPC timeout, Xid 119)", (119,), repair=True,
           weight=17 * 0.6),
    Reason(INFRA, "GPU system processor", "RuntimeError: CUDA error: unspecified launch"
           f" failure on {_GPU} (GSP error, Xid 120)", (120,), repair=True, weight=17 * 0.4),
    Reason(INFRA, "NIC", "NCCL WARN NET/IB : mlx5_1:1 port error: link down on {node}"
           " (NIC firmware fault)", repair=True, weight=7),
    Reason(INFRA, "NCCL watchdog timeout", "[Rank 0] Watchdog caught collective operation"
           " timeout: WorkNCCL(OpType=ALLREDUCE) ran for 1800000 milliseconds before timing"
           " out ({node})", weight=7),
    Reason(INFRA, "silent data corruption", f"RuntimeError: CUDA error: silent data"
           f" corruption suspected on {_GPU}: gradient checksum mismatch between replicas",
           repair=True, weight=6),
    Reason(INFRA, "GPU thermal interface + sensor", f"RuntimeError: CUDA error: unknown error"
           f" on {_GPU} (thermal sensor reading out of range)", repair=True, weight=6),
    Reason(INFRA, "SSD", "OSError: [Errno 5] Input/output error: '/local/nvme/cache' on"
           " {node}", repair=True, weight=3),
    *(Reason(INFRA, name, "slurmstepd: error: *** JOB CANCELLED DUE TO NODE FAILURE ON {node}"
             f" *** ({name.lower()} fault)", node_fail=True, repair=True, weight=n)
      for name, n in (("power supply", 3), ("server chassis", 2), ("IO expansion board", 2),
                      ("CPU", 2), ("system memory", 2))),
    Reason(INFRA, "dependency", "ConnectionError: [Errno 111] Connection refused (package"
           " mirror unreachable from {node})", weight=2),
)
ALL_REASONS = INFRA_REASONS + LLAMA3_H100 + FRAMEWORK_REASONS + SCRIPT_REASONS


def hardware_reasons(c, partition: int) -> tuple[Reason, ...]:
    """What a fault drawn at the hardware rate (per 1,000 node-days) of a run in
    ``partition`` (0 train, 1 eval) can be: the Llama 3 report's H100 causes where
    ``c.llama3_h100`` and the partition's GPUs are H100s; Acme's hardware faults where
    transient errors are drawn on their own (``c.network_per_1000_node_days``,
    ``c.startup_infra_p``); else Acme's whole infrastructure taxonomy (the demo)."""
    if c.llama3_h100 and (c.train_model, c.eval_model)[partition] == "H100":
        return LLAMA3_H100
    if c.network_per_1000_node_days > 0 or c.startup_infra_p > 0:
        return HARDWARE
    return INFRA_REASONS


def weights(reasons: tuple[Reason, ...]):
    """Normalised draw probabilities of a group of reasons."""
    total = sum(r.weight for r in reasons)
    return [r.weight / total for r in reasons]


XID_TEXT = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    62: "Internal micro-controller halt",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
