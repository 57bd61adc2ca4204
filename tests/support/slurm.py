"""A real Slurm 22.05 cluster on localhost, in a temp directory, for integration tests.

munged (with a temp key), MariaDB (mariadb-install-db in a temp datadir, on a local
socket and port), slurmdbd, slurmctld and one slurmd named ``node1`` with eight fake
GPUs (``Name=gpu File=<dir>/nvidia[0-7]``, ordinary files, ``AutoDetect=off``). Every
daemon runs in the foreground as root, on free ports, and is stopped in teardown; the
client commands find the cluster through ``SLURM_CONF`` (see :attr:`LocalSlurm.env`).
The job-completion log is written too (``jobcomp/filetxt``), for the fallback path.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.integration import free_port

DAEMONS = {  # program -> Debian package
    "munged": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "slurmdbd": "slurmdbd",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "squeue": "slurm-client",
    "sacct": "slurm-client",
    "sbatch": "slurm-client",
    "scontrol": "slurm-client",
}


class LocalSlurm:
    """Start with :meth:`start`, stop with :meth:`stop`; ``run(*argv)`` runs a client."""

    def __init__(self, root: Path, gpus: int = 8, cpus: int | None = None,
                 shared: str | None = None):
        self.root = Path(root)
        self.gpus = gpus
        # a shared GRES on every GPU: "shard" (4 per GPU) or "mps" (100 per GPU)
        self.shared = shared
        self.cpus = cpus or max(2, os.cpu_count() or 2)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.jobcomp = self.root / "jobcomp.txt"
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "TZ": "UTC"}

    # -- configuration ------------------------------------------------------------
    def _write_configs(self, ports: dict[str, int]) -> None:
        r = self.root
        for d in ("state", "spool/node1", "log", "gpu", "db", "run"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for i in range(self.gpus):
            (r / "gpu" / f"nvidia{i}").touch()
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        self.conf.write_text(
            f"""ClusterName=gpulens
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports['ctld']}
SlurmdPort={ports['slurmd']}
SlurmUser=root
SlurmdUser=root
{auth}CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports['dbd']}
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
AccountingStoragePass={self.munge_socket}
MailProg=/bin/true
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
MinJobAge=2
KillWait=1
InactiveLimit=0
MessageTimeout=5
SlurmctldTimeout=10
SlurmdTimeout=30
OverTimeLimit=0
NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={self.cpus} RealMemory=1000 Gres=gpu:{self.gpus} State=UNKNOWN
PartitionName=gpu Nodes=node1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        (r / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName=node1 Name=gpu File={r}/gpu/nvidia[0-{self.gpus - 1}]\n")
        if self.shared:
            self._share_gpus()
        dbd = r / "slurmdbd.conf"
        dbd.write_text(
            f"""{auth}DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports['dbd']}
SlurmUser=root
PidFile={r}/run/slurmdbd.pid
LogFile={r}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['mysql']}
StorageLoc=slurm_acct_db
StorageUser=root
""")
        dbd.chmod(0o600)

    def _share_gpus(self) -> None:
        """Add the shared GRES: ``Name=shard Count=4 File=<gpu>`` per GPU (MPS: 100)."""
        kind, per = self.shared, {"shard": 4, "mps": 100}[self.shared]
        conf = self.conf.read_text()
        conf = conf.replace("GresTypes=gpu", f"GresTypes=gpu,{kind}")
        conf = conf.replace(f"Gres=gpu:{self.gpus}", f"Gres=gpu:{self.gpus},{kind}:{per * self.gpus}")
        self.conf.write_text(conf)
        with open(self.root / "gres.conf", "a") as f:
            for i in range(self.gpus):
                f.write(f"NodeName=node1 Name={kind} Count={per} File={self.root}/gpu/nvidia{i}\n")

    # -- processes ----------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 (kept open)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                cwd=self.root, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def _wait(self, what: str, check, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} while waiting for "
                                       f"{what}:\n{self.logs(name)}")
            if check():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def logs(self, only: str | None = None) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            if only is None or f.name.startswith(only):
                out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def run(self, *argv: str, check: bool = True, timeout: float = 30.0) -> str:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def _ok(self, *argv: str) -> bool:
        return subprocess.run(list(argv), capture_output=True, env=self.env,
                              check=False).returncode == 0

    def start(self) -> LocalSlurm:
        r = self.root
        ports = {k: free_port() for k in ("ctld", "slurmd", "dbd", "mysql")}
        self._write_configs(ports)
        self._spawn("munged", ["munged", "-F", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={r}/munge.key", f"--log-file={r}/log/munged.log",
                               f"--pid-file={r}/run/munged.pid",
                               f"--seed-file={r}/run/munged.seed"])
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={r}/db", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, check=True, env=self.env, timeout=120)
        self._spawn("mariadbd", [
            "mariadbd", "--no-defaults", f"--datadir={r}/db", "--user=root",
            f"--socket={r}/run/mysql.sock", f"--port={ports['mysql']}",
            "--bind-address=127.0.0.1", f"--pid-file={r}/run/mysql.pid",
            "--skip-log-bin", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M",
            "--innodb-flush-log-at-trx-commit=0", "--skip-name-resolve",
            "--skip-grant-tables"])  # a throwaway server: no accounts to set up
        self._wait("munged", lambda: self.munge_socket.exists())
        self._wait("mariadbd", lambda: self._port_open(ports["mysql"]))
        self._spawn("slurmdbd", ["slurmdbd", "-D"])  # reads slurmdbd.conf beside SLURM_CONF
        self._wait("slurmdbd", lambda: self._port_open(ports["dbd"]), timeout=60)
        self.run("sacctmgr", "-i", "add", "cluster", "gpulens", check=False)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self._ok("scontrol", "ping"))
        self._spawn("slurmd", ["slurmd", "-D", "-N", "node1", "-f", str(self.conf)])
        self._wait("node1 idle", lambda: "idle" in self.run(
            "sinfo", "-h", "-N", "-o", "%t", check=False), timeout=60)
        return self

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def stop(self) -> None:
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def missing() -> list[tuple[str, str]]:
    """(program, Debian package) of every program the cluster needs that is absent."""
    return [(p, pkg) for p, pkg in DAEMONS.items() if shutil.which(p) is None]
