#!/usr/bin/env python3
"""Latency seen by many clients at once: UDP queries from N distinct source addresses at a fixed
rate (the sizing group of bench/run.sh). dnsperf sends from a handful of sockets on one address;
a cluster-level meshdns serves every pod of a node, each from its own address. Not part of CI.

    sources.py SERVER:PORT NAMES_FILE BASE N RATE SECONDS

BASE is "127.A.B": the sources are 127.A.B.1 … then 127.A.B+1.1 …, 250 per third octet, one
socket each (all of 127.0.0.0/8 is local on the loopback, nothing else is asked). Queries go
round-robin over the sources and over the names (lines "NAME TYPE" as dnsperf reads them, type
A only), paced at RATE a second for SECONDS. Prints one line per query, "LATENCY_US RCODE"
(latency -1 when no answer came within a second), then "# sources N sent S answered A".
"""
import random
import selectors
import socket
import struct
import sys
import time


def query(qid, name):
    out = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00" + struct.pack(">HH", 1, 1)


def main():
    server, names_file, base, n, rate, seconds = sys.argv[1:7]
    host, port = server.rsplit(":", 1)
    dest = (host, int(port))
    n, rate, seconds = int(n), float(rate), float(seconds)
    a, b = (int(x) for x in base.split(".")[1:3])
    names = [line.split()[0] for line in open(names_file) if line.strip()]
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((f"127.{a}.{b + i // 250}.{i % 250 + 1}", 0))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    pending = {}  # (socket index, id) -> send time
    lines = []
    rng = random.Random(1)
    sent = answered = 0
    total = int(rate * seconds)
    start = time.monotonic()
    while sent < total or pending:
        now = time.monotonic()
        due = start + sent / rate
        if sent < total and now >= due:
            k = sent % n
            qid = rng.randrange(65536)
            socks[k].sendto(query(qid, names[sent % len(names)]), dest)
            pending[(k, qid)] = time.monotonic()
            sent += 1
            continue
        if sent >= total and now > start + seconds + 1.0:
            break
        wait = max(0.0, min(due - now, 0.05)) if sent < total else 0.05
        for key, _ in sel.select(wait):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except BlockingIOError:
                continue
            if len(data) < 12:
                continue
            t = time.monotonic()
            qid, flags = struct.unpack(">HH", data[:4])
            k = key.data
            sent_at = pending.pop((k, qid), None)
            if sent_at is not None:
                answered += 1
                lines.append(f"{(t - sent_at) * 1e6:.0f} {flags & 0xF}")
    lines.extend("-1 -1" for _ in pending)
    print("\n".join(lines))
    print(f"# sources {n} sent {sent} answered {answered}")


if __name__ == "__main__":
    main()
