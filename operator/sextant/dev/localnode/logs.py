"""Container logs of the local node: where they are, how to read them, and the kubelet endpoint serving them.

Every container the agent runs writes stdout and stderr (interleaved, as written) to

    <workdir>/logs/<namespace>/<pod>/<container>.log

The file is truncated when a pod of that name starts and kept after the pod ends or is deleted. `read()`
returns it; `kubectl logs POD [-f] [--tail N] [--limit-bytes N]` works through the API server, which proxies
to the endpoint served here (https on the node's InternalIP and daemonEndpoints.kubeletEndpoint.Port,
`/containerLogs/<ns>/<pod>/<container>`), the way it asks a kubelet. The API server of a kwokctl cluster
has no --kubelet-certificate-authority, so it does not verify the self-signed certificate; against an API
server that does, use `kubectl logs --insecure-skip-tls-verify-backend`. Timestamps, --since and --previous
are not supported (no timestamps are stored, and containers are never restarted).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

log = logging.getLogger(__name__)

FOLLOW_POLL = 0.2
CHUNK = 64 * 1024


def log_path(workdir: Path | str, namespace: str, pod: str, container: str) -> Path:
    return Path(workdir) / "logs" / namespace / pod / f"{container}.log"


def read(workdir: Path | str, namespace: str, pod: str, container: str | None = None) -> str:
    """The whole log of a container (the pod's only/first log file when container is None); '' if none yet."""
    if container is None:
        files = sorted((Path(workdir) / "logs" / namespace / pod).glob("*.log"))
        if not files:
            return ""
        path = files[0]
    else:
        path = log_path(workdir, namespace, pod, container)
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _tail_offset(path: Path, lines: int) -> int:
    """The file offset where the last `lines` lines start."""
    if lines <= 0:
        return path.stat().st_size
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        end = pos = f.tell()
        newlines = 0
        # A trailing newline ends the last line; it does not start another one.
        skip_last = True
        while pos > 0:
            step = min(CHUNK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 0x0A:
                    if skip_last and pos + i == end - 1:
                        continue
                    newlines += 1
                    if newlines == lines:
                        return pos + i + 1
            skip_last = False
        return 0


def self_signed_certificate(directory: Path, name: str, ip: str) -> tuple[Path, Path] | None:
    """A certificate and key for the kubelet endpoint (made once with openssl), or None without openssl."""
    cert, key = directory / "kubelet.crt", directory / "kubelet.key"
    if cert.exists() and key.exists():
        return cert, key
    openssl = shutil.which("openssl")
    if openssl is None:
        log.warning("openssl not found: the kubelet endpoint (kubectl logs) is disabled; logs stay in files")
        return None
    directory.mkdir(parents=True, exist_ok=True)
    cmd = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-days", "3650", "-subj", f"/CN={name}", "-addext", f"subjectAltName=IP:{ip},DNS:localhost,DNS:{name}",
           "-keyout", str(key), "-out", str(cert)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log.warning("openssl could not make a certificate (%s): kubectl logs is disabled", proc.stderr.strip())
        return None
    os.chmod(key, 0o600)
    return cert, key


class KubeletServer:
    """The part of a kubelet's HTTPS API the API server uses for `kubectl logs`.

    `running(namespace, pod, container)` says whether that container still runs (a followed log ends when
    it does not).
    """

    def __init__(self, workdir: Path, running: Callable[[str, str, str], bool]) -> None:
        self.workdir = workdir
        self.running = running
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int, cert: Path, key: Path) -> int:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self.container_logs)
        app.router.add_get("/healthz", self.healthz)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert), str(key))
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ctx)
        await site.start()
        server = site._server  # the one way aiohttp tells the port it bound for port 0
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        query = request.query
        if query.get("previous", "false").lower() == "true":
            return web.Response(status=400, text=f"previous terminated container {container!r} in pod {pod!r} "
                                                 "not found (the local node never restarts containers)")
        path = log_path(self.workdir, ns, pod, container)
        if not path.is_file():
            return web.Response(status=404, text=f"container {container!r} in pod {ns}/{pod} has no log here")
        follow = query.get("follow", "false").lower() == "true"
        try:
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
            tail = int(query["tailLines"]) if "tailLines" in query else None
        except ValueError:
            return web.Response(status=400, text="limitBytes and tailLines must be integers")
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        sent = 0
        with path.open("rb") as f:
            if tail is not None:
                f.seek(_tail_offset(path, tail))
            while limit is None or sent < limit:
                # Whether it runs is asked before reading, so what it wrote before it ended is still sent.
                alive = follow and self.running(ns, pod, container)
                block = f.read(CHUNK if limit is None else min(CHUNK, limit - sent))
                if block:
                    await response.write(block)
                    sent += len(block)
                    continue
                if not alive:
                    break
                await asyncio.sleep(FOLLOW_POLL)
        await response.write_eof()
        return response
