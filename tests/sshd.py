"""A real OpenSSH server on 127.0.0.1 for the ssh:// target tests.

`start_sshd(dir)` generates a host key and a user key, writes `authorized_keys`, a
`known_hosts` with the host key and an ssh client config (`Host kopt-loopback`), and runs
Debian's `sshd` as a non-daemon child on a free port. `find_sshd()` is None when sshd is not
installed (the tests then skip, saying so).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str | None:
    for path in SSHD_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("sshd")


@dataclass
class Sshd:
    """A running loopback sshd and the client files that reach it."""

    process: subprocess.Popen[bytes]
    port: int
    user: str
    directory: Path
    client_key: Path
    known_hosts: Path
    client_config: Path
    """ssh_config with `Host kopt-loopback` and `Host 127.0.0.1` (key, port, known_hosts)."""

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_sshd(directory: Path) -> Sshd:
    sshd = find_sshd()
    if sshd is None:
        raise FileNotFoundError("sshd is not installed (apt-get install openssh-server)")
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    keygen(host_key)
    keygen(client_key)
    authorized = directory / "authorized_keys"
    authorized.write_text(client_key.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    user = getpass.getuser()
    config = directory / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized}", "StrictModes no", "UsePAM no",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "PidFile none",
        "LogLevel ERROR", "MaxSessions 50", "MaxStartups 50:30:100", "",
    ]))
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=open(directory / "sshd.log", "wb"))
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    client_config = directory / "ssh_config"
    block = (f"  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {client_key}\n"
             f"  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n")
    client_config.write_text(f"Host kopt-loopback\n{block}\nHost 127.0.0.1\n{block}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited: {(directory / 'sshd.log').read_text()[-500:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return Sshd(process, port, user, directory, client_key, known_hosts, client_config)
