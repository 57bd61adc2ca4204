"""Helpers for tests that need real programs: skip locally, fail in CI."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]


def required() -> bool:
    """True in CI: a missing program is then a failure, not a skip."""
    return os.environ.get("GPULENS_REQUIRE_INTEGRATION") == "1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(path_or_name: str, package: str) -> str:
    """The program's path, or skip (fail in CI) saying which Debian package provides it."""
    found = shutil.which(path_or_name)
    if found:
        return found
    message = f"{path_or_name} is not installed (Debian package {package})"
    if required():
        pytest.fail(message + " and GPULENS_REQUIRE_INTEGRATION=1")
    pytest.skip(message)


class ServiceProcess:
    """``gpulens demo`` in a subprocess on a free port."""

    def __init__(self, db: Path, *args: str, timeout: float = 60.0):
        self.db = db
        cmd = [sys.executable, "-m", "gpulens.cli", "demo", "--port", "0", "--db", str(db),
               *args]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.output: list[str] = []
        deadline = time.monotonic() + timeout
        self.url = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            m = re.search(r"serving (http://\S+)", line)
            if m:
                self.url = m.group(1).rstrip("/")
                break
        if self.url is None:
            self.stop(signal.SIGKILL)
            raise AssertionError("gpulens demo did not start:\n" + "".join(self.output))

    def stop(self, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        self.output.append(rest or "")
        return self.proc.returncode


class Daemon:
    """A server program on 127.0.0.1 and a free port (``self.port``, ``self.url``), its
    output in ``root/<name>.log``, ready once ``GET url + ready_path`` answers 200.
    Subclasses build the command line from the port in :meth:`argv`."""

    name = "daemon"
    ready_path = "/"

    def __init__(self, binary: str, root: Path, timeout_s: float = 30.0):
        self.root = Path(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.root / f"{self.name}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([binary, *self.argv()], stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.root)
        self._wait_ready(timeout_s)

    def argv(self) -> list[str]:
        raise NotImplementedError

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n" + self.logs())
            try:
                if requests.get(self.url + self.ready_path, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become ready:\n" + self.logs())

    def logs(self) -> str:
        """The last 3,000 characters of its output."""
        return (self.root / f"{self.name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
