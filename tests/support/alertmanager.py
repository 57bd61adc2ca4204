"""A real Prometheus Alertmanager (Debian's ``prometheus-alertmanager``) for tests.

It runs on 127.0.0.1 and a free port with a temporary config and storage, no cluster
listener, and routes every alert (grouped by alertname and rack, 1-s group waits) to one
webhook receiver that also gets the resolved notifications.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.support.integration import free_port


class Alertmanager:
    """``binary`` serving on ``url``, routing to ``webhook_url``; ``stop()`` ends it."""

    def __init__(self, binary: str, root: Path, webhook_url: str, timeout_s: float = 20.0):
        config = Path(root) / "am.yml"
        config.write_text(f"""
route:
  receiver: hook
  group_by: [alertname, rack]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
""")
        port = free_port()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.path={Path(root) / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             "--log.level=warn"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("alertmanager exited: " + self.proc.stdout.read()) from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
