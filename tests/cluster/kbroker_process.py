"""A kbroker broker in cluster mode as a subprocess (`python -m kbroker serve`), so a test can stop, pause and
kill it as a real broker is; its log is kept beside its data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kbroker.testing import free_port

ROOT = Path(__file__).resolve().parents[2]


class KbrokerProcess:
    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.port = free_port()
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KbrokerProcess:
        overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.data),
                     "zookeeper.connect": self.zookeeper, "broker.id": str(self.broker_id), **self.overrides}
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", "INFO", "serve"]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "kbroker.log", "ab") as out:
            self.process = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return self

    def send(self, sig: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            if sig != signal.SIGKILL:
                os.kill(process.pid, signal.SIGCONT)  # a paused broker cannot stop itself
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def log_tail(self, lines: int = 40) -> str:
        path = self.workdir / "kbroker.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
