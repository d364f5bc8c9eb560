"""Git over smart HTTP on loopback: a small server in front of `git http-backend`.

Flux's source-controller (go-git) clones only over smart HTTP, so the
sandbox's repositories are served by git's own CGI program. `Repository`
commits files into a bare repository on disk, which is what a team pushing
to its git host amounts to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_GIT = shutil.which("git") or "git"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "sandbox",
    "GIT_AUTHOR_EMAIL": "sandbox@example.invalid",
    "GIT_COMMITTER_NAME": "sandbox",
    "GIT_COMMITTER_EMAIL": "sandbox@example.invalid",
}


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [_GIT, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd or "/")},
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip()}")
    return done.stdout.strip()


class Repository:
    """A bare repository served by the git server, and a way to commit to it."""

    def __init__(self, bare: Path, url: str, branch: str = "main") -> None:
        self.bare = bare
        self.url = url
        self.branch = branch

    def commit(self, files: Mapping[str, str], message: str) -> str:
        """Replace the repository's files with `files` (path -> text), commit, push; the sha."""
        with tempfile.TemporaryDirectory(prefix="git-work-") as folder:
            work = Path(folder)
            _git("init", "--quiet", f"--initial-branch={self.branch}", cwd=work)
            _git("remote", "add", "origin", str(self.bare), cwd=work)
            if _git("ls-remote", "--heads", "origin", self.branch, cwd=work):
                _git("fetch", "--quiet", "origin", self.branch, cwd=work)
                _git("reset", "--quiet", "--hard", "FETCH_HEAD", cwd=work)
                _git("rm", "-r", "--quiet", "--ignore-unmatch", ".", cwd=work)
            for path, text in files.items():
                target = work / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            _git("add", "--all", cwd=work)
            _git("commit", "--quiet", "--allow-empty", "-m", message, cwd=work)
            _git("push", "--quiet", "origin", f"HEAD:refs/heads/{self.branch}", cwd=work)
            return _git("rev-parse", "HEAD", cwd=work)


class GitServer:
    """`git http-backend` behind a threaded HTTP server on a loopback port of the OS's choosing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(root))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="git-server", daemon=True
        )

    @property
    def host(self) -> str:
        """The server's ``host:port``, as the function input's ``source.allowedHosts`` lists it."""
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://{self.host}"

    def __enter__(self) -> GitServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def repository(self, name: str, branch: str = "main") -> Repository:
        """A new, empty bare repository `<name>.git`."""
        bare = self.root / f"{name}.git"
        _git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare), cwd=self.root)
        # http-backend serves repositories that say so (or all, with GIT_HTTP_EXPORT_ALL).
        (bare / "git-daemon-export-ok").touch()
        return Repository(bare, f"{self.url}/{name}.git", branch)


def _handler(root: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """Runs `git http-backend` as a CGI program for each request."""

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: a sync every few seconds would fill the terminal."""

        def _cgi(self) -> None:
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            environment = {
                "PATH": os.environ.get("PATH", ""),
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "REMOTE_ADDR": self.client_address[0],
            }
            done = subprocess.run(
                [_GIT, "http-backend"],
                input=body,
                capture_output=True,
                env=environment,
                timeout=120,
                check=False,
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers: list[tuple[str, str]] = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
