"""Chaos soak: meshdns under steady traffic of every route while its world misbehaves.

The world is a model, and every reply is checked against it. Four clusters a (local), b, c, d
each run a small DNS server of this script's (UDP and TCP; d only over DNS over TLS with a
client certificate required) that answers like a cluster's CoreDNS for a StatefulSet `db` in
namespace `prod`: pod `db-K` of cluster number N has the address 10.N.0.K. So an address says
which cluster it came from, and a reply to a name of cluster Y carrying 10.X.* is a wrong
answer, the worst bug meshdns can have.

While about 400 queries a second (UDP and TCP; cluster zones, prefixed and gathered distributed
names, SRV sets, pass-through) run, a seeded schedule of faults and operations plays: peers
stopped, black-holed and restarted, members added and removed, cluster c removed from the
configuration and re-added, cluster b's endpoint moved between two addresses, c's transport
switched between udp and tcp, the client certificate rotated, small floods of random names, and
peer links losing 1–10 % of their UDP datagrams each way for a few seconds (nftables
`numgen random` drops, in the soak's own network namespace).
Configuration changes are written the way the kubelet writes a mounted ConfigMap.

Invariants, checked on every reply or at the end:
- answered within MESHDNS_TIMEOUT plus slack (a query never hangs);
- never an address of cluster X under a name (or prefix) of cluster Y;
- no answer from a removed cluster once the reload that removed it is applied and the longest
  TTL it could have handed out (5 s) has passed;
- no TLS connection presenting the rotated-out client certificate once the rotation is applied;
- after the storm: RSS, open files and background tasks back near their baseline, and no
  metric series of an endpoint that is no longer configured;
- while every cluster is up and its link loses at most 5 % each way (a calm window after the
  storm, b's and c's links lossy): no gathered answer is partial
  (`meshdns_gather_partial_total` does not move) and no query gets SERVFAIL.

Usage (inside a network namespace of its own; tests/chaos/run.sh sets it up):
    python3 chaos.py --meshdns BIN --work DIR [--seconds 60] [--qps 400] [--seed 7]
Prints one line per violation (at most 20 of each kind), a summary, and exits 1 on any.
"""

import argparse
import asyncio
import collections
import multiprocessing
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

TTL = 5
NEGATIVE_TTL = 5
TIMEOUT = 2.0  # MESHDNS_TIMEOUT
SLACK = 1.0  # a loaded 2-core machine
MESHDNS = "127.0.70.1"
ADMIN = f"http://{MESHDNS}:9153/metrics"
NUMBER = {"a": 1, "b": 2, "c": 3, "d": 4}
PEER_ADDR = {"a": "127.0.60.1", "b": "127.0.60.2", "c": "127.0.60.3", "d": "127.0.60.4"}
B_MOVED = "127.0.61.2"  # cluster b's second home
TLS_NAME = "dot-d.chaos.test"
SLOW = 0.8  # how late a slow peer answers: its legs straggle past a reload
SOA = "ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"
# The links that lose datagrams: the UDP peers' addresses (d speaks DNS over TLS only).
LOSSY = {"b": [PEER_ADDR["b"], B_MOVED], "c": [PEER_ADDR["c"]]}
CALM_LOSS = (1, 5)  # per cent each way in the calm window, where nothing may fail
CALM_LOSS_SECONDS = 8
DOMAIN = dns.name.from_text("cluster.local.")


def pod_addr(cluster, member):
    return f"10.{NUMBER[cluster]}.0.{member}"


def cluster_of_addr(addr):
    """The cluster whose pod network holds addr (10.N.0.K), or None."""
    parts = addr.split(".")
    if len(parts) == 4 and parts[0] == "10":
        for name, number in NUMBER.items():
            if parts[1] == str(number):
                return name
    return None


# ---------------------------------------------------------------------------------------------
# The world: each cluster's DNS


class Peer:
    """One cluster's exposed DNS: answers from the cluster's member set, or misbehaves."""

    def __init__(self, cluster, addrs, tls=None):
        self.cluster = cluster
        self.addrs = addrs
        self.tls = tls  # ssl.SSLContext: serve DNS over TLS on 853 only
        self.members = {0, 1, 2}
        self.mode = "up"  # up | slow | blackhole | stopped
        self.servers = []
        self.client_serials = []  # (time, serial) of each TLS connection

    def answer(self, wire):
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            return None
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA
        if not query.question:
            reply.set_rcode(dns.rcode.FORMERR)
            return reply.to_wire()
        question = query.question[0]
        name, rdtype = question.name, question.rdtype
        labels = [label.decode().lower() for label in name.relativize(DOMAIN).labels]
        found = False
        if name.is_subdomain(DOMAIN) and labels[-3:] == ["db", "prod", "svc"]:
            host = labels[:-3]
            members = sorted(self.members)
            if host == []:  # the headless service
                found = True
                # No member left: NODATA with the SOA, as CoreDNS answers. (dnspython writes an
                # empty RRset as one record of length 0, RFC 2136's "delete an RRset": a
                # malformed answer, which meshdns rightly takes as the cluster failing.)
                if rdtype == dns.rdatatype.A and members:
                    reply.answer.append(
                        dns.rrset.from_text_list(
                            name, TTL, "IN", "A", [pod_addr(self.cluster, m) for m in members]
                        )
                    )
            elif host == ["_mongodb", "_tcp"]:
                found = True
                if rdtype == dns.rdatatype.SRV and members:
                    targets = [f"db-{m}.db.prod.svc.cluster.local." for m in members]
                    reply.answer.append(
                        dns.rrset.from_text_list(
                            name, TTL, "IN", "SRV", [f"0 50 27017 {t}" for t in targets]
                        )
                    )
                    for m, target in zip(members, targets):
                        reply.additional.append(
                            dns.rrset.from_text(target, TTL, "IN", "A", pod_addr(self.cluster, m))
                        )
            elif len(host) == 1 and re.fullmatch(r"db-(\d+)", host[0]):
                member = int(host[0][3:])
                found = member in self.members
                if found and rdtype == dns.rdatatype.A:
                    reply.answer.append(
                        dns.rrset.from_text(name, TTL, "IN", "A", pod_addr(self.cluster, member))
                    )
        elif self.cluster == "a" and name == dns.name.from_text("www.example.test."):
            found = True
            if rdtype == dns.rdatatype.A:
                reply.answer.append(dns.rrset.from_text(name, 300, "IN", "A", "192.0.2.80"))
        if not found:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        if not reply.answer:
            reply.authority.append(dns.rrset.from_text(DOMAIN, NEGATIVE_TTL, "IN", "SOA", SOA))
        return reply.to_wire()

    async def start(self):
        loop = asyncio.get_running_loop()
        peer = self
        for addr in self.addrs:
            if self.tls is None:

                class Udp(asyncio.DatagramProtocol):
                    def connection_made(self, transport):
                        self.transport = transport

                    def datagram_received(self, data, source):
                        if peer.mode in ("up", "slow"):
                            reply = peer.answer(data)
                            if reply is not None:
                                delay = SLOW if peer.mode == "slow" else 0
                                loop.call_later(delay, self.reply_later, reply, source)

                    def reply_later(self, reply, source):
                        # A slow reply falls due after the peer stopped: its socket is closed.
                        if not self.transport.is_closing():
                            self.transport.sendto(reply, source)

                transport, _ = await loop.create_datagram_endpoint(Udp, local_addr=(addr, 53))
                self.servers.append(transport)
                self.servers.append(await asyncio.start_server(self.serve_stream, addr, 53))
            else:
                self.servers.append(
                    await asyncio.start_server(self.serve_stream, addr, 853, ssl=self.tls)
                )

    async def serve_stream(self, reader, writer):
        if self.tls is not None:
            cert = writer.get_extra_info("peercert") or {}
            self.client_serials.append((time.monotonic(), cert.get("serialNumber")))
        try:
            while True:
                length = int.from_bytes(await reader.readexactly(2), "big")
                data = await reader.readexactly(length)
                if self.mode not in ("up", "slow"):
                    continue
                if self.mode == "slow":
                    await asyncio.sleep(SLOW)
                reply = self.answer(data)
                if reply is not None:
                    writer.write(len(reply).to_bytes(2, "big") + reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # the peer is being stopped: its connections end with it
        finally:
            writer.close()

    async def stop(self):
        self.mode = "stopped"
        for server in self.servers:
            server.close()
        self.servers = []
        # Transports and listeners close on the loop's next turns; the address is free after.
        await asyncio.sleep(0.05)

    async def restart(self):
        await self.stop()
        self.mode = "up"
        await self.start()


async def serve_world(commands, tls):
    """The peers, in a process of their own (so that the load generator's event loop lag
    does not look like a slow peer), obeying commands from the soak until told to exit."""
    peers = {
        "a": Peer("a", [PEER_ADDR["a"]]),
        "b": Peer("b", [PEER_ADDR["b"], B_MOVED]),
        "c": Peer("c", [PEER_ADDR["c"]]),
        "d": Peer("d", [PEER_ADDR["d"]], tls=tls),
    }
    for peer in peers.values():
        await peer.start()
    commands.send("ready")
    loop = asyncio.get_running_loop()
    while True:
        op, cluster, argument = await loop.run_in_executor(None, commands.recv)
        peer = peers.get(cluster)
        try:
            outcome = await obey(peers, op, peer, argument)
        except OSError as error:
            outcome = f"error: {error}"
        commands.send(outcome)
        if op == "exit":
            return


async def obey(peers, op, peer, argument):
    if op == "stop":
        await peer.stop()
    elif op in ("blackhole", "slow"):
        peer.mode = op
    elif op == "restart":
        await peer.restart()
    elif op == "toggle":
        peer.members ^= {argument}
    elif op == "serials":
        return peer.client_serials
    elif op == "exit":
        for each in peers.values():
            await each.stop()
    return "ok"


class World:
    """The soak's handle on the peers' process."""

    def __init__(self, tls):
        self.commands, theirs = multiprocessing.Pipe()
        self.process = multiprocessing.Process(
            target=lambda: asyncio.run(serve_world(theirs, tls)), daemon=True
        )
        self.process.start()
        self.modes = dict.fromkeys(NUMBER, "up")
        # One command at a time on the pipe: calls come from concurrent tasks, and a send or
        # a receive interleaved with another's garbles both.
        self.turn = asyncio.Lock()

    async def call(self, op, cluster=None, argument=None):
        loop = asyncio.get_running_loop()
        async with self.turn:
            return await loop.run_in_executor(None, self._call, (op, cluster, argument))

    def _call(self, command):
        self.commands.send(command)
        outcome = self.commands.recv()
        if isinstance(outcome, str) and outcome.startswith("error"):
            raise RuntimeError(f"the world could not {command}: {outcome}")
        return outcome

    async def ready(self):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.commands.recv)

    async def fault(self, cluster, mode):
        self.modes[cluster] = mode
        await self.call("stop" if mode == "stopped" else mode, cluster)

    async def restart(self, cluster):
        self.modes[cluster] = "up"
        await self.call("restart", cluster)


class Loss:
    """Random loss on peer links: nftables rules dropping a share of the UDP datagrams to and
    from a peer's port 53 (`numgen random`), rebuilt from `percent` at every change. They drop
    on arrival (the input hook), so the loss is silent as on a real link: a datagram dropped
    on its way out fails its send() with EPERM instead."""

    TABLE = "chaos_loss"

    def __init__(self):
        self.percent = {}  # cluster → per cent each way
        self.nft("add", "table", "inet", self.TABLE)
        self.nft("add", "chain", "inet", self.TABLE, "in",
                 "{ type filter hook input priority 0; }")

    @staticmethod
    def nft(*args):
        subprocess.run(["nft", *args], check=True)

    def set(self, cluster, percent):
        self.percent[cluster] = percent
        self.nft("flush", "chain", "inet", self.TABLE, "in")
        for lossy, share in self.percent.items():
            for addr in LOSSY[lossy] if share else []:
                for match in (["ip", "daddr", addr, "udp", "dport", "53"],
                              ["ip", "saddr", addr, "udp", "sport", "53"]):
                    self.nft("add", "rule", "inet", self.TABLE, "in", *match,
                             "numgen", "random", "mod", "100", "<", str(share), "drop")


# ---------------------------------------------------------------------------------------------
# meshdns and its configuration


def kubelet_write(directory, payload):
    """Writes payload ({key: value}) the way the kubelet updates a mounted ConfigMap: a new
    timestamped directory, `..data` renamed over to point at it, one symlink per key."""
    os.makedirs(directory, exist_ok=True)
    stamp = os.path.join(
        directory, f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{random.getrandbits(40):x}"
    )
    os.mkdir(stamp)
    for key, value in payload.items():
        mode = "wb" if isinstance(value, bytes) else "w"
        with open(os.path.join(stamp, key), mode) as file:
            file.write(value if isinstance(value, bytes) else value + "\n")
    data = os.path.join(directory, "..data")
    old = os.readlink(data) if os.path.islink(data) else None
    tmp = os.path.join(directory, "..data_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.basename(stamp), tmp)
    os.rename(tmp, data)
    for key in payload:
        link = os.path.join(directory, key)
        if not os.path.lexists(link):
            os.symlink(f"..data/{key}", link)
    if old and old != os.path.basename(stamp):
        shutil.rmtree(os.path.join(directory, old), ignore_errors=True)


class Configuration:
    """What the operator has configured now, written to meshdns's configuration directory."""

    def __init__(self, directory):
        self.directory = directory
        self.present = {"a", "b", "c", "d"}
        self.b_addr = PEER_ADDR["b"]
        self.c_transport = "udp"

    def clusters(self):
        entries = {
            "a": "a=",
            "b": f"b={self.b_addr}:53",
            "c": f"c={PEER_ADDR['c']}:53 transport={self.c_transport}",
            "d": f"d={PEER_ADDR['d']}:853 transport=tls tls_name={TLS_NAME}",
        }
        return "; ".join(entries[name] for name in sorted(self.present))

    def endpoints(self):
        """The peer endpoints configured now: the only ones that may have metric series."""
        endpoints = {"b": f"{self.b_addr}:53", "c": f"{PEER_ADDR['c']}:53", "d": f"{PEER_ADDR['d']}:853"}
        return {endpoints[name] for name in self.present if name in endpoints}

    def write(self):
        kubelet_write(self.directory, {"MESHDNS_CLUSTERS": self.clusters()})


def metrics_text():
    try:
        with urllib.request.urlopen(ADMIN, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return ""


def metric(text, name, labels=""):
    """The sum of the samples of `name` whose label set contains `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {" and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def reloads_applied():
    return metric(metrics_text(), "meshdns_config_reloads_total", 'result="applied"')


async def wait_applied(before, deadline=5.0):
    """Waits until meshdns counts a reload applied after `before`; when it was seen."""
    started = time.monotonic()
    while time.monotonic() - started < deadline:
        if reloads_applied() > before:
            return time.monotonic()
        await asyncio.sleep(0.05)
    return None


def process_usage(pid):
    """(resident bytes, open file descriptors) of a process."""
    rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


# ---------------------------------------------------------------------------------------------
# The checks


def prefix_of(name):
    """The cluster a prefixed distributed name (`b-db-0.…`) names, by its first label."""
    return name.labels[0].decode().lower().split("-", 1)[0]


class Verdicts:
    def __init__(self):
        self.counts = collections.Counter()
        self.violations = collections.Counter()
        self.removed_since = {}  # cluster → time after which none of its answers may be served

    def violation(self, kind, detail):
        self.violations[kind] += 1
        if self.violations[kind] <= 20:
            print(f"VIOLATION {kind}: {detail}", flush=True)

    def must_be_gone(self, cluster, sent):
        since = self.removed_since.get(cluster)
        return since is not None and sent >= since

    def check(self, kind, qname, owner, reply, sent, elapsed, proto):
        """owner: the cluster a name belongs to (None for gathered sets and pass-through)."""
        self.counts[f"{proto} {dns.rcode.to_text(reply.rcode())}"] += 1
        if elapsed > TIMEOUT + SLACK:
            self.violation("late", f"{qname} {proto} answered after {elapsed:.2f} s")
        question = reply.question[0].name if reply.question else None
        for section in (reply.answer, reply.additional):
            for rrset in section:
                if rrset.rdtype != dns.rdatatype.A:
                    continue
                # Records owned by a prefixed name belong to that cluster; the answer of a
                # question about one cluster belongs to it; a union owned by the question may
                # hold any configured cluster's.
                if rrset.name != question and kind in ("srv", "union"):
                    expected = prefix_of(rrset.name)
                else:
                    expected = owner
                for rdata in rrset:
                    source = cluster_of_addr(rdata.address)
                    if source is not None and expected in NUMBER and source != expected:
                        self.violation(
                            "cross-cluster",
                            f"{qname}: {rrset.name} {rdata.address} is cluster {source}'s",
                        )
                    if source is not None and self.must_be_gone(source, sent):
                        self.violation(
                            "removed-cluster", f"{qname}: {rdata.address} of removed cluster {source}"
                        )
        for rrset in reply.answer:
            if rrset.rdtype == dns.rdatatype.SRV:
                for rdata in rrset:
                    if self.must_be_gone(prefix_of(rdata.target), sent):
                        self.violation("removed-cluster", f"{qname}: target {rdata.target}")


# ---------------------------------------------------------------------------------------------
# Traffic


def pick_query(rng):
    """(kind, name, type, the cluster the name belongs to)."""
    cluster = rng.choice("abcd")
    member = rng.randrange(0, 4)
    roll = rng.random()
    if roll < 0.35:
        return "cluster", f"db-{member}.db.prod.cluster.{cluster}.", "A", cluster
    if roll < 0.6:
        return "prefixed", f"{cluster}-db-{member}.db.prod.svc.distributed.local.", "A", cluster
    if roll < 0.75:
        return "srv", "_mongodb._tcp.db.prod.svc.distributed.local.", "SRV", None
    if roll < 0.85:
        return "union", "db.prod.svc.distributed.local.", "A", None
    if roll < 0.92:
        return "cluster", f"db-{member}.db.prod.cluster.{cluster}.", "AAAA", cluster
    return "passthrough", "www.example.test.", "A", None


def pick_miss(rng):
    """A name no cache holds, which every peer answers NXDOMAIN: each one crosses the links
    (the calm window's queries that must not fail while they lose datagrams)."""
    name = f"m{rng.getrandbits(40):x}"
    if rng.random() < 0.5:
        cluster = rng.choice(sorted(LOSSY))
        return "cluster", f"{name}.db.prod.cluster.{cluster}.", "A", cluster
    return "union", f"{name}.db.prod.svc.distributed.local.", "A", None


class Datagrams(asyncio.DatagramProtocol):
    def __init__(self):
        self.received = asyncio.Queue()

    def datagram_received(self, data, source):
        self.received.put_nowait(data)


async def udp_exchange(query, wait):
    """The first datagram meshdns sends back to a socket connected to it, raw: the reply is
    judged by the checks (a reply to another question is a failure, not noise to skip)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Datagrams, remote_addr=(MESHDNS, 53))
    try:
        transport.sendto(query.to_wire())
        return await asyncio.wait_for(protocol.received.get(), wait)
    finally:
        transport.close()


async def ask(verdicts, kind, qname, rdtype, owner, proto, unanswered):
    query = dns.message.make_query(qname, rdtype, use_edns=0, payload=1232)
    sent = time.monotonic()
    wait = TIMEOUT + SLACK + 2
    try:
        if proto == "tcp":
            reply = await dns.asyncquery.tcp(query, MESHDNS, timeout=wait)
        else:
            reply = dns.message.from_wire(await udp_exchange(query, wait))
    except (dns.exception.Timeout, asyncio.TimeoutError):
        unanswered[proto] += 1
        return
    except (OSError, dns.exception.DNSException) as error:
        verdicts.violation("error", f"{qname} {proto}: {error!r}")
        return
    if not query.is_response(reply):
        verdicts.violation("wrong-reply", f"{qname} {proto}: got id {reply.id} (sent {query.id}) for {reply.question}")
        return
    verdicts.check(kind, qname, owner, reply, sent, time.monotonic() - sent, proto)


async def traffic(verdicts, rng, qps, until, unanswered, pick=pick_query):
    """Queries (`pick`'s) at `qps` until `until`, a fifth of them over TCP, each checked."""
    tasks = set()
    next_at = time.monotonic()
    while time.monotonic() < until:
        kind, qname, rdtype, owner = pick(rng)
        proto = "tcp" if rng.random() < 0.2 else "udp"
        if len(tasks) < 800:
            task = asyncio.create_task(ask(verdicts, kind, qname, rdtype, owner, proto, unanswered))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        next_at += 1.0 / qps
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    if tasks:
        await asyncio.wait(tasks)


async def flood(count):
    """A small flood of random pass-through names, not checked (meshdns may shed it).

    Each query's socket stays open as long as meshdns may take to answer (its deadline, and the
    slack of a loaded machine): a socket closed sooner frees its port while a reply may still
    come, and a traffic query's new socket given the same port would take that late reply as
    its own (seen: a `wrong-reply` with a flood name, when the flood waited 1 s against a 2 s
    deadline)."""

    async def one():
        query = dns.message.make_query(f"r{random.getrandbits(48):x}.flood.example.test.", "A")
        try:
            await dns.asyncquery.udp(query, MESHDNS, timeout=TIMEOUT + SLACK, ignore_unexpected=True)
        except (dns.exception.DNSException, OSError, asyncio.TimeoutError):
            pass

    await asyncio.gather(*(one() for _ in range(count)))


# ---------------------------------------------------------------------------------------------
# The schedule


async def chaos(verdicts, rng, world, config, pki, loss, until, log):
    """Random faults and operations, and between them the two sequences that once gave
    another cluster's pods: a cluster removed while a later one is down (its position moves),
    and a cluster removed while a query to it is pending."""
    ops = collections.Counter()
    pending = set()

    def background(work):
        task = asyncio.create_task(work)
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def reconfigure(change, what):
        old = config.clusters()
        change()
        if config.clusters() == old:
            return None
        before = reloads_applied()
        config.write()
        applied = await wait_applied(before)
        if applied is None:
            verdicts.violation("reload", f"{what}: not applied within 5 s")
        ops[what] += 1
        return applied

    async def remove_c():
        applied = await reconfigure(lambda: config.present.discard("c"), "c removed")
        if applied is not None:
            verdicts.removed_since["c"] = applied + TTL + SLACK

    async def readd_c():
        verdicts.removed_since.pop("c", None)
        await reconfigure(lambda: config.present.add("c"), "c re-added")

    async def lossy(cluster, percent, seconds):
        loss.set(cluster, percent)
        ops[f"{cluster} lossy"] += 1
        await asyncio.sleep(seconds)
        loss.set(cluster, 0)

    async def lossy_episode():
        cluster = rng.choice(sorted(LOSSY))
        if not loss.percent.get(cluster):
            background(lossy(cluster, rng.randint(1, 10), rng.uniform(3, 6)))

    async def fault(cluster, mode, seconds):
        await world.fault(cluster, mode)
        ops[f"{cluster} {mode}"] += 1
        await asyncio.sleep(seconds)
        await world.restart(cluster)

    async def removed_while_later_down():
        if "c" not in config.present or world.modes["d"] != "up":
            return
        # c's legs straggle past the reload while d, which takes c's place in the list,
        # fails and is filled from what the cache holds for it.
        await world.fault("c", "slow")
        await world.fault("d", "blackhole")
        await asyncio.sleep(1.5)
        await remove_c()
        await asyncio.sleep(3)
        await world.restart("d")
        await world.restart("c")
        ops["c removed while slow and d down"] += 1

    async def removed_while_pending():
        if "c" not in config.present or world.modes["c"] != "up":
            return
        await world.fault("c", "blackhole")
        await asyncio.sleep(0.3)
        await remove_c()
        await world.restart("c")
        ops["c removed while black-holed"] += 1

    # The two sequences at set points of the run, the random operations around them.
    begun = time.monotonic()
    # (One lossy link at a set point too: the random ones may not come up in a short run.)
    scripted = [(0.1, lossy_episode), (0.2, removed_while_later_down), (0.45, removed_while_pending),
                (0.7, removed_while_later_down)]
    while time.monotonic() < until - 6:
        roll = rng.random()
        if scripted and time.monotonic() - begun >= scripted[0][0] * (until - begun):
            if "c" not in config.present:
                await readd_c()
                await asyncio.sleep(1)
            await scripted.pop(0)[1]()
        elif roll < 0.2:
            cluster = rng.choice("bcd")
            if world.modes[cluster] == "up":
                background(fault(cluster, rng.choice(["stopped", "blackhole"]), rng.uniform(2, 5)))
        elif roll < 0.32:
            await world.call("toggle", rng.choice("abcd"), rng.randrange(0, 4))
            ops["member toggled"] += 1
        elif roll < 0.42:
            await (remove_c() if "c" in config.present else readd_c())
        elif roll < 0.58:
            await readd_c() if "c" not in config.present else None
        elif roll < 0.68:
            moved = B_MOVED if config.b_addr == PEER_ADDR["b"] else PEER_ADDR["b"]
            await reconfigure(lambda: setattr(config, "b_addr", moved), "b moved")
        elif roll < 0.76:
            switched = "tcp" if config.c_transport == "udp" else "udp"
            await reconfigure(lambda: setattr(config, "c_transport", switched), "c transport switched")
        elif roll < 0.84:
            await lossy_episode()
        elif roll < 0.92:
            rotated = pki.rotate_client()
            before = reloads_applied()
            kubelet_write(pki.secret_dir, pki.secret_payload())
            applied = await wait_applied(before)
            if applied is None:
                verdicts.violation("reload", "client certificate rotation not applied within 5 s")
            else:
                pki.rotations.append((applied, rotated))
            ops["client certificate rotated"] += 1
        else:
            await flood(600)
            ops["flood"] += 1
        await asyncio.sleep(rng.uniform(1.0, 2.0))
    if pending:
        await asyncio.wait(pending)
    log(f"operations: {dict(sorted(ops.items()))}")


# ---------------------------------------------------------------------------------------------
# Certificates (openssl), for cluster d's DNS over TLS with client certificates


class Pki:
    def __init__(self, work):
        self.dir = os.path.join(work, "pki")
        self.secret_dir = os.path.join(work, "tls")
        os.makedirs(self.dir, exist_ok=True)
        self.generation = 0
        self.rotations = []  # (time the rotation was applied, serial of the new certificate)
        self.openssl(
            "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "2", "-subj", "/CN=chaos CA",
            "-keyout", self.path("ca.key"), "-out", self.path("ca.crt"),
        )
        self.leaf("server", TLS_NAME, "serverAuth")
        self.initial_serial = self.leaf("client-0", "meshdns", "clientAuth")

    def path(self, name):
        return os.path.join(self.dir, name)

    def openssl(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def leaf(self, name, cn, usage):
        """A certificate signed by the CA; its serial number in hex."""
        serial = f"{random.getrandbits(63):016X}"
        with open(self.path(f"{name}.ext"), "w") as ext:
            ext.write(f"subjectAltName=DNS:{cn}\nextendedKeyUsage={usage}\n")
        self.openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={cn}", "-keyout", self.path(f"{name}.key"), "-out", self.path(f"{name}.csr"),
        )
        self.openssl(
            "x509", "-req", "-in", self.path(f"{name}.csr"), "-CA", self.path("ca.crt"),
            "-CAkey", self.path("ca.key"), "-days", "2", "-set_serial", f"0x{serial}",
            "-extfile", self.path(f"{name}.ext"), "-out", self.path(f"{name}.crt"),
        )
        return serial

    def rotate_client(self):
        self.generation += 1
        return self.leaf(f"client-{self.generation}", "meshdns", "clientAuth")

    def secret_payload(self):
        name = f"client-{self.generation}"

        def read(file):
            with open(self.path(file), "rb") as content:
                return content.read()

        return {"ca.crt": read("ca.crt"), "tls.crt": read(f"{name}.crt"), "tls.key": read(f"{name}.key")}

    def server_context(self):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.path("server.crt"), self.path("server.key"))
        context.load_verify_locations(self.path("ca.crt"))
        context.verify_mode = ssl.CERT_REQUIRED
        return context


# ---------------------------------------------------------------------------------------------


async def calm_loss(verdicts, rng, loss, qps, unanswered, log, meshdns_log):
    """Every cluster up and configured, b's and c's links losing a few per cent each way: a
    lost datagram costs a retransmission, never a gathered answer's cluster nor a SERVFAIL.
    A violation quotes meshdns's own lines about it (which clusters a partial answer missed,
    and why their legs failed)."""
    percent = rng.randint(*CALM_LOSS)
    log_from = os.path.getsize(meshdns_log)
    for cluster in LOSSY:
        loss.set(cluster, percent)
    partial = metric(metrics_text(), "meshdns_gather_partial_total")
    retransmits = sum(metric(metrics_text(), "meshdns_upstream_retransmits_total", f'peer="{c}"') for c in LOSSY)
    before = collections.Counter(verdicts.counts)
    until = time.monotonic() + CALM_LOSS_SECONDS
    # The usual traffic (mostly cache hits) and as many misses, which all cross the links.
    await asyncio.gather(
        traffic(verdicts, rng, qps, until, unanswered),
        traffic(verdicts, rng, qps / 4, until, unanswered, pick=pick_miss),
    )
    for cluster in LOSSY:
        loss.set(cluster, 0)
    text = metrics_text()
    partial = metric(text, "meshdns_gather_partial_total") - partial
    retransmits = sum(metric(text, "meshdns_upstream_retransmits_total", f'peer="{c}"') for c in LOSSY) - retransmits
    during = verdicts.counts - before
    servfail = sum(n for kind, n in during.items() if kind.endswith("SERVFAIL"))
    log(f"calm window at {percent} % loss on b and c: {sum(during.values())} replies, "
        f"{partial:g} partial, {servfail} SERVFAIL, {retransmits:g} retransmissions")
    if partial:
        verdicts.violation("loss-partial", f"{partial:g} gathered answers partial at {percent} % loss")
        with open(meshdns_log, errors="replace") as lines:
            lines.seek(log_from)
            for line in [line for line in lines if "gather" in line][:20]:
                log(f"  meshdns: {line.rstrip()}")
    if servfail:
        verdicts.violation("loss-servfail", f"{servfail} SERVFAIL at {percent} % loss")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--meshdns", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--qps", type=float, default=400)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()

    def log(line):
        print(f"[{time.monotonic() - started:6.1f}s] {line}", flush=True)

    pki = Pki(args.work)
    world = World(pki.server_context())
    await world.ready()
    config = Configuration(os.path.join(args.work, "config"))
    config.write()
    kubelet_write(pki.secret_dir, pki.secret_payload())
    environment = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "MESHDNS_LISTEN": f"{MESHDNS}:53",
        "MESHDNS_ADMIN_LISTEN": f"{MESHDNS}:9153",
        "MESHDNS_UPSTREAMS": f"{PEER_ADDR['a']}:53",
        "MESHDNS_LOCAL_CLUSTER": "a",
        "MESHDNS_CONFIG_DIR": config.directory,
        "MESHDNS_TLS_CA_FILE": os.path.join(pki.secret_dir, "ca.crt"),
        "MESHDNS_TLS_CERT_FILE": os.path.join(pki.secret_dir, "tls.crt"),
        "MESHDNS_TLS_KEY_FILE": os.path.join(pki.secret_dir, "tls.key"),
        "MESHDNS_TIMEOUT": f"{TIMEOUT:g}s",
        "MESHDNS_CACHE_NEGATIVE_TTL": f"{NEGATIVE_TTL}s",
        "MESHDNS_CACHE_SIZE": "2000",
        # The gatherer's debug lines name the clusters a partial answer missed.
        "MESHDNS_LOG": os.environ.get("CHAOS_MESHDNS_LOG", "warn,meshdns::testing::gather=debug"),
    }
    log_file = open(os.path.join(args.work, "meshdns.log"), "w")
    process = subprocess.Popen([args.meshdns], env=environment, stdout=log_file, stderr=log_file)
    for _ in range(100):
        if metrics_text():
            break
        await asyncio.sleep(0.05)
    else:
        print("meshdns did not start; its log:", open(log_file.name).read(), file=sys.stderr)
        return 1

    verdicts = Verdicts()
    unanswered = collections.Counter()
    loss = Loss()
    # Warm up, then the baseline.
    await traffic(verdicts, rng, args.qps, time.monotonic() + 3, unanswered)
    baseline = process_usage(process.pid)
    baseline_tasks = metric(metrics_text(), "meshdns_background_tasks")
    log(f"baseline: RSS {baseline[0] / 2**20:.1f} MiB, {baseline[1]} fds, {baseline_tasks:g} background tasks")

    until = time.monotonic() + args.seconds
    await asyncio.gather(
        traffic(verdicts, rng, args.qps, until, unanswered),
        chaos(verdicts, rng, world, config, pki, loss, until, log),
    )
    peak = process_usage(process.pid)

    # The calm after the storm: everything back up and configured, then settle.
    for cluster, mode in world.modes.items():
        if mode != "up":
            await world.restart(cluster)
    if "c" not in config.present:
        verdicts.removed_since.pop("c", None)
        config.present.add("c")
        before = reloads_applied()
        config.write()
        await wait_applied(before)
    await asyncio.sleep(8)
    await traffic(verdicts, rng, args.qps, time.monotonic() + 3, unanswered)
    await calm_loss(verdicts, rng, loss, args.qps, unanswered, log, log_file.name)
    await asyncio.sleep(2)
    after = process_usage(process.pid)
    text = metrics_text()
    after_tasks = metric(text, "meshdns_background_tasks")
    log(f"after: RSS {after[0] / 2**20:.1f} MiB (peak {peak[0] / 2**20:.1f}), {after[1]} fds, {after_tasks:g} background tasks")
    if after[0] > baseline[0] * 1.5 + 8 * 2**20:
        verdicts.violation("resources", f"RSS {after[0]} not back near the baseline {baseline[0]}")
    if after[1] > baseline[1] + 8:
        verdicts.violation("resources", f"{after[1]} open files, baseline {baseline[1]}")
    if "meshdns_background_tasks" not in text:
        verdicts.violation("resources", "meshdns_background_tasks is not exported")
    elif after_tasks > baseline_tasks + 4:
        verdicts.violation("resources", f"{after_tasks:g} background tasks, baseline {baseline_tasks:g}")
    configured = config.endpoints()
    for line in text.splitlines():
        match = re.match(r'meshdns_upstream_healthy\{.*endpoint="([^"]+)"', line)
        if match and match.group(1) not in configured and not match.group(1).startswith(PEER_ADDR["a"]):
            verdicts.violation("stale-series", line)
    # A connection presenting a client certificate that a rotation retired before it opened.
    issued = [(0.0, pki.initial_serial)] + pki.rotations
    for opened, presented in await world.call("serials", "d"):
        index = next((i for i, (_, s) in enumerate(issued) if presented and int(s, 16) == int(presented, 16)), None)
        if index is None:
            verdicts.violation("rotated-certificate", f"connection presented unknown certificate {presented}")
        elif index + 1 < len(issued) and issued[index + 1][0] + SLACK < opened:
            verdicts.violation("rotated-certificate", f"connection at {opened - started:.1f} s presented retired {presented}")

    await world.call("exit")
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        verdicts.violation("shutdown", "meshdns did not exit within 10 s of SIGTERM")
    total = sum(verdicts.counts.values())
    lost = sum(unanswered.values())
    log(f"replies: {total} ({dict(sorted(verdicts.counts.items()))}); unanswered: {dict(unanswered)}")
    if total == 0 or lost > 0.01 * (total + lost):
        verdicts.violation("unanswered", f"{lost} of {total + lost} queries got no reply")
    if verdicts.violations:
        log(f"FAILED: {dict(verdicts.violations)}")
        return 1
    log(f"passed: {total} replies checked, 0 violations")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
