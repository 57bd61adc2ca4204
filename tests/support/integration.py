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
