"""A server and its client, the way perftest-style tools run: the server
first, the client once the server is ready, every wait bounded.

What tools/lib/server-then-client does for the shell scripts, for Python:
bench/compare runs three tools whose servers say they are ready in
different ways, so readiness is a parameter:

  ReadyLine(text)  the server prints a line containing `text` (cordma-perf:
                   "listening on")
  ReadyPort(port)  the server's TCP port is in LISTEN (`ss -ltnH`): perftest
                   and ucx_perftest print nothing reliable before they
                   listen (their stdout is block-buffered into a pipe), and
                   their clients do not retry a refused connect

Nothing here sleeps to wait for something to happen: readiness is polled
(the port every 20 ms) up to a deadline, and every failure raises
PairError naming which side failed, how, and the tail of its output.
"""

import os
import queue
import subprocess
import threading
import time


class PairError(RuntimeError):
    pass


class ReadyLine:
    def __init__(self, text):
        self.text = text

    def __str__(self):
        return f"the line '{self.text}'"


class ReadyPort:
    def __init__(self, port):
        self.port = port

    def __str__(self):
        return f"TCP port {self.port} in LISTEN"


def port_listening(port):
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
    return bool(out.strip())


def _tail(text, lines=12):
    return "\n".join(text.rstrip().splitlines()[-lines:])


class _Reader:
    """Collects a process's output on a thread, line by line, so that
    neither a full pipe nor a silent process can block the caller."""

    def __init__(self, stream):
        self.lines = []
        self.queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream):
        for line in stream:
            self.lines.append(line)
            self.queue.put(line)
        self.queue.put(None)

    def text(self):
        self.thread.join(timeout=5)
        return "".join(self.lines)


def run_pair(name, server_cmd, client_cmd, ready, env=None, ready_within=30, client_within=120,
             exit_within=30):
    """Runs server_cmd, then client_cmd once `ready` holds. Returns
    (client_stdout, server_output). Raises PairError if either fails, the
    server is not ready within ready_within s, the client takes longer than
    client_within s, or the server has not exited exit_within s after its
    client."""
    environment = dict(os.environ, **(env or {}))
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=environment, errors="replace")
    out = _Reader(server.stdout)
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if isinstance(ready, ReadyLine):
                try:
                    line = out.queue.get(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                except queue.Empty:
                    line = ""
                if line and ready.text in line:
                    break
                if line is None:
                    server.wait(timeout=5)
                    raise PairError(f"{name}: the server exited with status {server.returncode} before "
                                    f"{ready}:\n{_tail(out.text())}")
            else:
                if port_listening(ready.port):
                    break
                if server.poll() is not None:
                    raise PairError(f"{name}: the server exited with status {server.returncode} before "
                                    f"{ready}:\n{_tail(out.text())}")
                time.sleep(0.02)  # the poll interval, not a wait for readiness
            if time.monotonic() > deadline:
                raise PairError(f"{name}: the server showed no {ready} within {ready_within} s:\n"
                                f"{_tail(''.join(out.lines))}")
        try:
            client = subprocess.run(client_cmd, capture_output=True, text=True, env=environment,
                                    timeout=client_within, errors="replace")
        except subprocess.TimeoutExpired as e:
            partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            raise PairError(f"{name}: the client did not finish within {client_within} s:\n{_tail(partial)}")
        if client.returncode != 0:
            raise PairError(f"{name}: the client exited with status {client.returncode}:\n"
                            f"{_tail(client.stdout + client.stderr)}\nserver:\n{_tail(''.join(out.lines), 6)}")
        try:
            server.wait(timeout=exit_within)
        except subprocess.TimeoutExpired:
            raise PairError(f"{name}: the server was still running {exit_within} s after its client finished:\n"
                            f"{_tail(''.join(out.lines))}")
        if server.returncode != 0:
            raise PairError(f"{name}: the server exited with status {server.returncode}:\n{_tail(out.text())}")
        return client.stdout, out.text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
