"""nginx with the repository's config (deploy/nginx-class.conf) in front of several app servers, for the replica
test (tests/test_browser_replicas.py) and bench.experiments.failover: the config is used as it is, with only its ports and
temp folders replaced. Imports no streamlit."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from bench.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "deploy" / "nginx-class.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                       if os.path.exists(p)), None)


def render(conf: str, ports: list[int], listen: int, tmp: Path) -> str:
    """deploy/nginx-class.conf with ``ports`` as its upstream servers, ``listen`` as its port and temp folders
    below ``tmp``; ValueError when the config no longer has the lines this replaces."""
    servers = re.findall(r"^\s*server 127\.0\.0\.1:\d+;.*$", conf, flags=re.M)
    if len(servers) < 2 or "listen 127.0.0.1:" not in conf:
        raise ValueError("deploy/nginx-class.conf changed: no `server 127.0.0.1:PORT;` lines or `listen` to replace")
    out = conf.replace(servers[0], "\n".join(f"        server 127.0.0.1:{p};" for p in ports))
    for line in servers[1:]:
        out = out.replace(line, "")
    out = re.sub(r"listen 127\.0\.0\.1:\d+;", f"listen 127.0.0.1:{listen};", out)
    out = re.sub(r"(client_body_temp_path|proxy_temp_path) /tmp/[\w-]+;",
                 lambda m: f"{m.group(1)} {tmp / m.group(1)};", out)
    return out


class Nginx:
    """nginx in the foreground (``daemon off``) with the rendered config; ``url`` is what students open."""

    def __init__(self, ports: list[int], workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(workdir)
        self.proc: subprocess.Popen | None = None
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "nginx.conf"
        self.conf.write_text(render(CONF.read_text(), ports, self.port, self.dir))

    def start(self, timeout: float = 30) -> "Nginx":
        glob = "daemon off;"
        if os.geteuid() == 0:  # workers would run as nobody and could not write the temp folders below tmp
            glob += f" user {pwd.getpwuid(0).pw_name};"
        self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(self.conf), "-e",
                                      str(self.dir / "logs" / "error.log"), "-g", glob],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nginx did not listen on {self.port}:\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.dir / "logs" / "error.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def upstream_for(self, cookie: str, path: str = "/_stcore/health") -> str:
        """Which server (127.0.0.1:PORT) answers a browser whose sticky cookie is ``cookie``."""
        req = urllib.request.Request(self.url + path, headers={"Cookie": f"bx_backend={cookie}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.headers["X-Upstream"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
