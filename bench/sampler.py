#!/usr/bin/env python3
"""Samples a process's resident memory, and meshdns's in-flight gauge, every 100 ms.

    sampler.py PID METRICS_URL SECONDS OUT

Writes OUT as lines "EPOCH_SECONDS RSS_KB INFLIGHT" (wall clock, so the benchmark can place its
own events, taken from bash's EPOCHREALTIME, on the same axis; INFLIGHT is -1 when /metrics did
not answer within 50 ms). Stops after SECONDS or when the process is gone. METRICS_URL must be
on 127.0.0.0/8. Standard library only.
"""

import http.client
import ipaddress
import sys
import time
import urllib.parse


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


class Metrics:
    """One kept-alive HTTP connection to /metrics, re-opened when it fails."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        if not ipaddress.ip_address(u.hostname).is_loopback:
            sys.exit(f"sampler: {u.hostname} is not a loopback address")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/metrics"
        self.conn = None

    def inflight(self):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=0.05)
            self.conn.request("GET", self.path)
            body = self.conn.getresponse().read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return -1
        for line in body.splitlines():
            if line.startswith("meshdns_inflight "):
                try:
                    return int(float(line.split()[1]))
                except ValueError:
                    return -1
        return -1


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    pid, url, seconds, out = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    metrics = Metrics(url)
    start = time.monotonic()
    with open(out, "w", encoding="ascii") as f:
        k = 0
        while time.monotonic() - start < seconds:
            rss = rss_kb(pid)
            if rss is None:
                break
            f.write(f"{time.time():.3f} {rss} {metrics.inflight()}\n")
            f.flush()
            k += 1
            time.sleep(max(0.0, start + k * 0.1 - time.monotonic()))


if __name__ == "__main__":
    main()
