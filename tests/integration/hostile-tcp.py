#!/usr/bin/python3
"""Raw TCP attacks on a listening port, for tests/integration/hostile-network.sh.

Usage: hostile-tcp.py IP PORT ATTACK... where ATTACK is one of
  garbage     4 KiB of pseudo-random bytes
  huge        a ZMTP 3.0 greeting (CURVE), then a command frame announcing 1 GiB
  gloo-huge   a Gloo TCP frame header (six little-endian size_t: nbytes, opcode SEND_BUFFER,
              slot, offset, length, roffset) announcing 1 GiB, then 1 KiB
  half        half a greeting, then silence
  idle:N      N connections that send nothing
  replay:LPORT  listen on IP's host at LPORT (the address in $HOSTILE_LISTEN), relay one
              client to the target recording what it sends, inject the client's last chunk
              into the same connection once it is done, then replay everything it sent on
              a new connection
Prints one line per attack: "NAME closed-after SECONDS" ("open" when the peer kept the
connection past the limit), plus details; never raises on a refused connection (that is an
answer too: "refused").
"""
import os
import select
import socket
import struct
import sys
import time

LIMIT = float(os.environ.get("HOSTILE_LIMIT_S", "8"))


def dial(ip, port):
    return socket.create_connection((ip, port), timeout=5)


def seconds_to_close(s, limit):
    """Seconds until the peer closes s (reads EOF or an error), or None past limit."""
    t0 = time.monotonic()
    s.setblocking(False)
    while time.monotonic() - t0 < limit:
        r, _, _ = select.select([s], [], [], 0.05)
        if not r:
            continue
        try:
            if not s.recv(65536):
                return time.monotonic() - t0
        except BlockingIOError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def show(name, t, extra=""):
    print(f"{name} " + ("open" if t is None else f"closed-after {t:.2f}") + (f" {extra}" if extra else ""), flush=True)


def greeting(mechanism=b"CURVE"):
    g = bytearray(64)
    g[0], g[9], g[10] = 0xFF, 0x7F, 3
    g[12:12 + len(mechanism)] = mechanism
    return bytes(g)


def attack(ip, port, what):
    try:
        if what == "garbage":
            s = dial(ip, port)
            s.sendall(bytes((i * 2654435761 >> 13) & 0xFF for i in range(4096)))
            show(what, seconds_to_close(s, LIMIT))
        elif what == "huge":
            s = dial(ip, port)
            s.sendall(greeting() + bytes([0x06, 0, 0, 0, 0, 0x40, 0, 0, 0]) + b"x" * 1024)
            show(what, seconds_to_close(s, LIMIT))
        elif what == "gloo-huge":
            s = dial(ip, port)
            s.sendall(struct.pack("<6Q", 48 + (1 << 30), 0, 1, 0, 1 << 30, 0) + b"x" * 1024)
            show(what, seconds_to_close(s, LIMIT))
        elif what == "half":
            s = dial(ip, port)
            s.sendall(greeting()[:11])
            show(what, seconds_to_close(s, LIMIT))
        elif what.startswith("idle:"):
            n = int(what[5:])
            t0 = time.monotonic()
            conns, refused = [], 0
            for _ in range(n):
                try:
                    conns.append(dial(ip, port))
                except OSError:
                    refused += 1
            times = [seconds_to_close(c, max(0.01, LIMIT - (time.monotonic() - t0))) for c in conns]
            closed = [t for t in times if t is not None]
            print(f"idle {n} connected {len(conns)} refused {refused} closed {len(closed)} "
                  f"last-closed-after {time.monotonic() - t0 if len(closed) == len(conns) else -1:.2f}", flush=True)
            for c in conns:
                c.close()
        elif what.startswith("replay:"):
            replay(ip, port, int(what[7:]))
        else:
            raise SystemExit(f"unknown attack {what}")
    except ConnectionRefusedError:
        print(f"{what} refused", flush=True)


def replay(ip, port, lport):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((os.environ["HOSTILE_LISTEN"], lport))
    lst.listen(1)
    print("relay listening", flush=True)
    lst.settimeout(30)
    down, _ = lst.accept()
    up = dial(ip, port)
    chunks = []
    while True:
        r, _, _ = select.select([down, up], [], [], 10)
        if not r:
            break
        if down in r:
            b = down.recv(65536)
            if not b:
                break
            chunks.append(b)
            up.sendall(b)
        if up in r:
            b = up.recv(65536)
            if not b:
                break
            down.sendall(b)
    down.close()
    # The client is done and gone: its last chunk (its request) again, on its connection.
    try:
        up.sendall(chunks[-1])
    except OSError:
        pass
    show("replay-same-connection", seconds_to_close(up, LIMIT), f"chunks {len(chunks)}")
    s = dial(ip, port)
    t0 = time.monotonic()
    for c in chunks:
        try:
            s.sendall(c)
        except OSError:  # closed on us already: the answer we want
            break
        time.sleep(0.05)
    t = seconds_to_close(s, LIMIT)
    show("replay-new-connection", None if t is None else time.monotonic() - t0)


def main():
    ip, port = sys.argv[1], int(sys.argv[2])
    for what in sys.argv[3:]:
        attack(ip, port, what)


if __name__ == "__main__":
    main()
