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
ALL_REASONS = INFRA_REASONS + FRAMEWORK_REASONS + SCRIPT_REASONS


def weights(reasons: tuple[Reason, ...]):
    """Normalised draw probabilities of a group of reasons."""
    total = sum(r.weight for r in reasons)
    return [r.weight / total for r in reasons]


XID_TEXT = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
}
