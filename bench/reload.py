#!/usr/bin/env python3
"""The live-configuration rows (issue 15): a configuration directory written exactly as the
kubelet writes a mounted ConfigMap, changed while meshdns runs.

    reload.py write DIR SRC          DIR takes the files of SRC (one per variable)
    reload.py time DIR SRC_A SRC_B SERVER N OUT
    reload.py churn DIR SRC_A SRC_B SECONDS INTERVAL

The layout (kubelet's atomic writer): a timestamped directory `..2026_11_30_12_00_00.123456`
holding the files, a symlink `..data` to it, and one symlink per key `KEY -> ..data/KEY`. An
update writes a new timestamped directory, points `..data_tmp` at it, renames `..data_tmp` over
`..data` (the one event meshdns must see), adds and removes key symlinks, then deletes the old
directory.

`time`: N times, SRC_A in force (cluster c absent; waits until `mongo-0.mongo.db.cluster.c`
no longer answers), then the swap to SRC_B (cluster c added) and a query for a name of cluster c
never asked before (`h<i>.mongo.db.cluster.c`) every 2 ms until it answers NOERROR with a record.
Writes one line per swap to OUT: "ADD_MS REMOVE_MS" (from the rename to the first answer; from
the rename back to SRC_A to the first reply that is no longer cluster c's).

`churn`: swaps between SRC_A and SRC_B every INTERVAL seconds for SECONDS, and prints the count.

SERVER is IP:PORT on 127.0.0.0/8. Standard library only.
"""

import datetime
import ipaddress
import os
import random
import shutil
import socket
import struct
import sys
import time


def write(d, src):
    os.makedirs(d, exist_ok=True)
    stamp = datetime.datetime.now().strftime("..%Y_%m_%d_%H_%M_%S.%f")
    new = os.path.join(d, stamp)
    while os.path.exists(new):
        new += "0"
        stamp += "0"
    os.mkdir(new)
    keys = sorted(k for k in os.listdir(src) if not k.startswith("."))
    for k in keys:
        shutil.copyfile(os.path.join(src, k), os.path.join(new, k))
    data = os.path.join(d, "..data")
    old = os.readlink(data) if os.path.islink(data) else None
    tmp = os.path.join(d, "..data_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(stamp, tmp)
    os.rename(tmp, data)
    for k in keys:
        link = os.path.join(d, k)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", k), link)
    for k in os.listdir(d):
        if not k.startswith(".") and k not in keys:
            os.unlink(os.path.join(d, k))
    if old and old != stamp:
        shutil.rmtree(os.path.join(d, old), ignore_errors=True)


def server(spec):
    host, _, port = spec.rpartition(":")
    if not ipaddress.ip_address(host).is_loopback:
        sys.exit(f"reload.py: {host} is not a loopback address")
    return host, int(port)


def ask(sock, name, timeout=0.05):
    """(rcode, ancount) of one A query, or (None, 0) without a reply in time."""
    qid = random.getrandbits(16)
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack("!HH", 1, 1)
    sock.settimeout(timeout)
    sock.send(q)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            r = sock.recv(4096)
        except (socket.timeout, OSError):
            return None, 0
        if len(r) >= 12 and struct.unpack("!H", r[:2])[0] == qid:
            return r[3] & 0x0F, struct.unpack("!H", r[6:8])[0]
    return None, 0


def until(sock, name, answered, t0, limit=10.0):
    """Milliseconds from `t0` until `answered(rcode, ancount)` holds for `name`, or None."""
    while time.monotonic() - t0 < limit:
        rcode, an = ask(sock, name)
        if rcode is not None and answered(rcode, an):
            return (time.monotonic() - t0) * 1000.0
        time.sleep(0.002)
    return None


def timed(d, src_a, src_b, srv, n, out):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(server(srv))
    base = random.randrange(1000)
    with open(out, "w", encoding="ascii") as f:
        for i in range(n):
            t0 = time.monotonic()
            write(d, src_a)
            removed = until(sock, "mongo-0.mongo.db.cluster.c", lambda rc, an: not (rc == 0 and an > 0), t0)
            time.sleep(0.5)  # past meshdns's settling delay: the next swap is an event of its own
            name = f"h{(base + i) % 1000}.mongo.db.cluster.c"
            t1 = time.monotonic()
            write(d, src_b)
            added = until(sock, name, lambda rc, an: rc == 0 and an > 0, t1)
            f.write(f"{-1 if added is None else round(added, 1)} {-1 if removed is None else round(removed, 1)}\n")
            f.flush()
            # The first query for `mongo-0…cluster.c` with c present, so the next removal must
            # also drop a cached entry of the removed route.
            ask(sock, "mongo-0.mongo.db.cluster.c")
            time.sleep(0.5)


def churn(d, src_a, src_b, seconds, interval):
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        write(d, src_b if k % 2 == 0 else src_a)
        k += 1
        time.sleep(interval)
    print(k)


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "write":
        write(a[1], a[2])
    elif len(a) == 7 and a[0] == "time":
        timed(a[1], a[2], a[3], a[4], int(a[5]), a[6])
    elif len(a) == 6 and a[0] == "churn":
        churn(a[1], a[2], a[3], float(a[4]), float(a[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
