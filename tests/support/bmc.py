"""Real BMC emulators for tests (issue 21): sushy-static serving a Redfish mockup and
OpenIPMI's ipmi_sim answering IPMI over LAN. Both bind 127.0.0.1 only."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
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
{sensors}mc_enable 0x20
"""
_NO_EVENTS = "000000000000000"


@dataclass(frozen=True)
class SimSensor:
    """An analog sensor ipmi_sim serves, with its full sensor record (IPMI 2.0 table
    43-1). Its value, in ``unit``, is read from a file every 0.2 s; the record converts
    it with the factor ``m`` (a raw byte 0-255 times m), so values are multiples of m up
    to 255 m. ``scanning`` False: the BMC answers "reading unavailable" (ipmitool says
    "Disabled")."""

    number: int
    name: str
    value: int
    entity: int = 7  # IPMI entity id: 7 system board, 10 power supply
    instance: int = 1
    unit: int = 6  # IPMI base unit code: 6 watts, 1 degrees C
    m: int = 10
    scanning: bool = True

    def record(self) -> str:
        """The full sensor record as main_sdr_add's hexadecimal bytes."""
        name = self.name.encode("ascii")
        body = [0x20, 0x00, self.number, self.entity, self.instance,
                0x7F, 0x40,  # initialisation; capabilities: auto re-arm, no thresholds
                0x0B, 0x01,  # sensor type "other units-based", event/reading type threshold
                0, 0, 0, 0, 0, 0,  # event and reading masks
                0x00, self.unit, 0x00, 0x00,  # unsigned; base unit; no modifier; linear
                self.m & 0xFF, (self.m >> 8) << 6, 0, 0, 0, 0x00,  # M, B, accuracy, exponents
                0x00, 0, 0, 0, 0xFF, 0x00,  # flags, nominal, normal max/min, sensor max/min
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  # thresholds, hysteresis, reserved, OEM
                0xC0 | len(name), *name]  # 8-bit ASCII id string
        return " ".join(f"0x{b:02x}" for b in [0x00, 0x00, 0x51, 0x01, len(body), *body])


# A GPU node's BMC: the total, two supplies' inputs, a third supply slot that reads
# nothing, and a temperature (Acme's median GPU node: ~2,520 W).
POWER_SENSORS = (
    SimSensor(0x77, "Pwr Consumption", 2525, m=25),
    SimSensor(0x64, "PS1 Input Power", 1260, entity=10, instance=1),
    SimSensor(0x66, "PS2 Input Power", 1240, entity=10, instance=2),
    SimSensor(0x68, "PS3 Input Power", 0, entity=10, instance=3, scanning=False),
    SimSensor(0x04, "Inlet Temp", 23, unit=1, m=1),
)


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
    """OpenIPMI's ``ipmi_sim`` with one LAN channel on a free UDP port of 127.0.0.1, one
    admin user (:data:`IPMI_USER`, :data:`IPMI_PASSWORD`) and the ``sensors`` given (their
    records in the SDR, their values changed with :meth:`set_value`). ipmi_sim answers no
    DCMI command."""

    def __init__(self, workdir: Path, sensors: tuple[SimSensor, ...] = ()):
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
        self._workdir, self._sensors = workdir, {x.number: x for x in sensors}
        lines = []
        for x in sensors:
            (workdir / f"sensor-{x.number:02x}").write_text(f"{x.value}\n")
            lines += [f'sensor_add 0x20 0 {x.number:#04x} 0x0b 0x01 poll 200 file '
                      f'"{workdir / f"sensor-{x.number:02x}"}" div={x.m}',
                      f"main_sdr_add 0x20 {x.record()}"]
            if x.scanning:
                lines.append(f"sensor_set_event_support 0x20 0 {x.number:#04x} enable "
                             f"scanning per-state {' '.join([_NO_EVENTS] * 4)}")
        (workdir / "emu.cmd").write_text(_EMU.format(sensors="".join(f"{x}\n" for x in lines)))
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

    def ipmitool(self, *args: str) -> str:
        """The real ipmitool's output for ``args`` against this BMC (password in its
        environment)."""
        host, port = self.address.rsplit(":", 1)
        done = subprocess.run([shutil.which("ipmitool"), "-I", "lanplus", "-C", "3", "-H",
                               host, "-p", port, "-U", IPMI_USER, "-E", *args],
                              capture_output=True, text=True, timeout=30, check=False,
                              env={"IPMI_PASSWORD": IPMI_PASSWORD})
        return done.stdout

    def set_value(self, number: int, value: int) -> None:
        """Sets a sensor's value (a multiple of its m) and waits until the BMC reads it."""
        x = self._sensors[number]
        (self._workdir / f"sensor-{number:02x}").write_text(f"{value}\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            read = self.ipmitool("sensor", "reading", x.name).partition("|")[2].strip()
            if read == str(value):
                return
            time.sleep(0.1)
        raise AssertionError(f"ipmi_sim did not read {value} for {x.name!r}")

    def stop(self) -> None:
        _stop(self.proc)
