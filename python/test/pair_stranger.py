"""A stranger on this host for test_torch.py: it watches the TCP listeners of given processes
on 127.0.0.1 (their Gloo pairs' ports: torch.distributed's group and libomni's own) and, as
each appears, connects to it as four strangers would:
  garbage     64 random bytes;
  header      a Gloo frame header announcing a 1 GiB message (Gloo's tcp pair reads the
              header, then the size it names);
  idle        nothing at all, the connection held open;
  half_token  8 bytes, half of a pair's 16-byte token, then nothing.
For each it measures how long the listening side took to close the connection (refused: the
port no longer listened when the stranger came)."""

import os
import socket
import struct
import threading
import time

KINDS = ("garbage", "header", "idle", "half_token")
# How long a stranger waits for the rank to close its connection before it gives up (then
# the connection counts as held that long: a bound the test checks).
WAIT_S = 30.0


def _payload(kind):
    if kind == "garbage":
        return os.urandom(64)
    if kind == "header":
        # Gloo's tcp Op preamble: nbytes, opcode (0: send), slot, offset, length, roffset.
        return struct.pack("<6Q", 1 << 30, 0, 1, 0, 1 << 30, 0)
    if kind == "half_token":
        return os.urandom(8)
    return b""


class Stranger(threading.Thread):
    def __init__(self, procs, host="127.0.0.1"):
        super().__init__(daemon=True)
        self.procs, self.host = procs, host
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.ports = set()            # every listener attacked
        self.closed = {k: [] for k in KINDS}   # seconds from connect to the rank's close
        self.refused = 0
        self.attacks = []

    def stop(self):
        self.stopping.set()
        self.join(timeout=5)
        for t in self.attacks:
            t.join(timeout=WAIT_S + 5)

    def _socket_inodes(self):
        inodes = set()
        for p in list(self.procs):
            d = "/proc/%d/fd" % p.pid
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                try:
                    target = os.readlink(os.path.join(d, n))
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        return inodes

    def _listening(self):
        want = "%08X" % struct.unpack("<I", socket.inet_aton(self.host))[0]
        inodes = self._socket_inodes()
        ports = set()
        try:
            with open("/proc/net/tcp") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    addr, port = cols[1].split(":")
                    if cols[3] == "0A" and addr in (want, "00000000") and cols[9] in inodes:
                        ports.add(int(port, 16))
        except OSError:
            pass
        return ports

    def _attack(self, port, kind):
        t0 = time.monotonic()
        try:
            s = socket.create_connection((self.host, port), timeout=2)
        except OSError:
            with self.lock:
                self.refused += 1
            return
        try:
            data = _payload(kind)
            if data:
                s.sendall(data)
            s.settimeout(WAIT_S)
            while s.recv(4096):
                pass
        except (socket.timeout, OSError):
            pass
        finally:
            s.close()
        with self.lock:
            self.closed[kind].append(time.monotonic() - t0)

    def run(self):
        while not self.stopping.is_set():
            for port in self._listening() - self.ports:
                self.ports.add(port)
                for kind in KINDS:
                    t = threading.Thread(target=self._attack, args=(port, kind), daemon=True)
                    t.start()
                    self.attacks.append(t)
            time.sleep(0.01)

    def summary(self):
        with self.lock:
            parts = ["%d listeners" % len(self.ports), "%d refused by the kernel" % self.refused]
            for k in KINDS:
                v = self.closed[k]
                if v:
                    parts.append("%s: %d closed in %.3f..%.3f s" % (k, len(v), min(v), max(v)))
            return "; ".join(parts)
