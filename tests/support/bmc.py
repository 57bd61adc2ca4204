"""Real BMC emulators for tests (issue 21): sushy-static serving a Redfish mockup and
OpenIPMI's ipmi_sim answering IPMI over LAN. Both bind 127.0.0.1 only."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.integration import free_port, need

IPMI_USER, IPMI_PASSWORD = "admin", "s3cret-pw"

_LAN_CONF = """name "gpulens"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  user 2 true "{user}" "{password}" admin 10 none md2 md5 straight
"""

_EMU = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
mc_enable 0x20
"""


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class SushyStatic:
    """``sushy-static -m <mockup>`` on a free port; ``address`` is ``127.0.0.1:port``."""

    def __init__(self, mockup: Path):
        exe = str(Path(sys.executable).parent / "sushy-static")
        if not Path(exe).exists():
            exe = need("sushy-static", "sushy-tools (pip, the test extras)")
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen([exe, "-i", "127.0.0.1", "-p", str(port), "-m",
                                      str(mockup)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        _stop(self.proc)
        raise AssertionError(f"sushy-static did not listen on {self.address}")

    def stop(self) -> None:
        _stop(self.proc)


class IpmiSim:
    """OpenIPMI's ``ipmi_sim`` with one LAN channel on a free UDP port of 127.0.0.1 and
    one admin user (:data:`IPMI_USER`, :data:`IPMI_PASSWORD`)."""

    def __init__(self, workdir: Path):
        exe = need("ipmi_sim", "openipmi")
        need("ipmitool", "ipmitool")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        state = workdir / "state"
        state.mkdir(parents=True, exist_ok=True)
        (workdir / "lan.conf").write_text(_LAN_CONF.format(port=port, user=IPMI_USER,
                                                           password=IPMI_PASSWORD))
        (workdir / "emu.cmd").write_text(_EMU)
        # -n: no console on stdin (its absence aborts ipmi_sim's event loop)
        self.proc = subprocess.Popen([exe, "-c", str(workdir / "lan.conf"), "-f",
                                      str(workdir / "emu.cmd"), "-s", str(state), "-n"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        tool = shutil.which("ipmitool")
        while time.monotonic() < deadline:  # ready when it answers a session
            ok = subprocess.run([tool, "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p",
                                 str(port), "-U", IPMI_USER, "-E", "-R", "1", "-N", "1",
                                 "mc", "info"], capture_output=True, timeout=15,
                                env={"IPMI_PASSWORD": IPMI_PASSWORD}, check=False)
            if ok.returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        _stop(self.proc)
        raise AssertionError(f"ipmi_sim did not answer on {self.address}")

    def stop(self) -> None:
        _stop(self.proc)
