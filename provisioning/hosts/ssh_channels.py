"""What travels over channels of an open SSH connection, besides commands and SFTP:
probes of what the host's sshd allows on one connection (sessions, SFTP, TCP forwarding;
preflight's checks) and HTTP/1.0 to a port on the host's loopback (the server under
test, reached through a direct-tcpip channel). provisioning.hosts.remote.Remote calls these on
its connection and maps their failures to its errors.
"""

from __future__ import annotations

import paramiko


def session_capacity(transport: paramiko.Transport, wanted: int) -> int:
    """How many sessions TRANSPORT may hold at once (sshd's MaxSessions), counted up to
    WANTED by opening them together."""
    opened = []
    try:
        for _ in range(wanted):
            try:
                opened.append(transport.open_session(timeout=10))
            except paramiko.ChannelException:
                break
    finally:
        for channel in opened:
            channel.close()
    return len(opened)


def sftp_problem(client: paramiko.SSHClient) -> str | None:
    """None when the host serves SFTP; else what went wrong opening it."""
    try:
        client.open_sftp().close()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return str(exc) or type(exc).__name__
    return None


def forwarding_problem(transport: paramiko.Transport) -> str | None:
    """None when sshd forwards TCP to the host's loopback; a closed port answers "connect
    failed" (forwarding works), a refusal "prohibited"."""
    try:
        channel = transport.open_channel(
            "direct-tcpip", ("127.0.0.1", 1), ("127.0.0.1", 0), timeout=10
        )
    except paramiko.ChannelException as exc:
        if exc.code == paramiko.common.OPEN_FAILED_CONNECT_FAILED:
            return None
        return exc.text or f"channel refused (code {exc.code})"
    channel.close()
    return None


def http_over(channel: paramiko.Channel, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """GET PATH over CHANNEL (HTTP/1.0, the connection closed by the server): (status, body);
    EOFError when what came back is not an HTTP response."""
    lines = [f"GET {path} HTTP/1.0", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    channel.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while chunk := channel.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise EOFError("no HTTP response")
    return int(status_line[1]), body
