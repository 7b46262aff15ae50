#!/usr/bin/env python3
"""Attacks and scrapes an HTTP port (tests/bench/http_port_server, or any
server binary taking --port_file) as issue 22 item 15 describes, and prints
what a scraper saw and what the server held, as a table and one JSON line.

  http_port_bench.py SERVER [--slow 1000] [--addresses 20] [--seconds 20]
                     [--flood_mb 200] [--flood_line 8000]

1. idle: 20 scrapes of /metrics, one connection each, nothing else open.
2. slow: --slow connections from --addresses loopback addresses
   (127.0.1.1, ...; under the server's per-address limit), each sending half
   a request header and then one more header byte a second, reopened as soon
   as the server cuts one, for --seconds; meanwhile a scrape every 250 ms
   from 127.0.0.1 (15 s timeout). The server's resident memory and open
   descriptors are sampled every 100 ms.
3. flood: one connection at a time (from 127.0.2.1) sends a request line
   and then header lines of --flood_line bytes, reconnecting whenever the
   server cuts it, until --flood_mb MB were sent; the server's VmRSS is
   sampled every 20 ms, and its VmHWM (the kernel's peak) read before and
   after; then 20 more scrapes.
"""
import argparse
import errno
import http.client
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def vm_bytes(pid, field="VmRSS"):
    """A /proc/PID/status size: VmRSS (resident now) or VmHWM (its peak)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def vm_rss_bytes(pid):
    return vm_bytes(pid, "VmRSS")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler(threading.Thread):
    """Peak VmRSS and open descriptors of `pid` until stop()."""

    def __init__(self, pid, period):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.peak_rss = self.peak_fds = 0
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            self.peak_rss = max(self.peak_rss, vm_rss_bytes(self.pid))
            self.peak_fds = max(self.peak_fds, open_fds(self.pid))
            self._done.wait(self.period)

    def stop(self):
        self._done.set()
        self.join()


def scrape(port, timeout):
    """Seconds one GET /metrics took, or None if it failed or timed out."""
    start = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                          source_address=("127.0.0.1", 0))
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status != 200:
            return None
    except (OSError, http.client.HTTPException):
        return None
    return time.monotonic() - start


class Scraper(threading.Thread):
    """A scrape every `period` seconds until stop(); the latencies."""

    def __init__(self, port, period, timeout):
        super().__init__(daemon=True)
        self.port, self.period, self.timeout = port, period, timeout
        self.latencies, self.failures = [], 0
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            took = scrape(self.port, self.timeout)
            if took is None:
                self.failures += 1
            else:
                self.latencies.append(took)
            self._done.wait(self.period)

    def stop(self):
        self._done.set()
        self.join()


def summary(latencies, failures):
    if not latencies:
        return {"scrapes": 0, "failed": failures}
    ordered = sorted(latencies)
    return {
        "scrapes": len(ordered),
        "failed": failures,
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def idle_scrapes(port, count=20):
    latencies, failures = [], 0
    for _ in range(count):
        took = scrape(port, 15)
        if took is None:
            failures += 1
        else:
            latencies.append(took)
    return summary(latencies, failures)


def open_slow(port, address):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((address, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return s


def slow_phase(port, pid, count, addresses, seconds):
    """Holds `count` slow connections for `seconds` while scraping."""
    sources = [f"127.0.1.{1 + i % addresses}" for i in range(count)]
    selector = selectors.DefaultSelector()
    socks = {}  # index -> socket
    cuts = 0

    def reopen(i):
        s = open_slow(port, sources[i])
        socks[i] = s
        selector.register(s, selectors.EVENT_READ, i)
        return s

    for i in range(count):
        reopen(i)
    # Connections whose half header is still to be sent (their connect may
    # not have completed yet).
    pending = set(range(count))
    prefix = b"GET /metrics HTTP/1.1\r\nHost: bench\r\nX-Slow: "
    sampler = Sampler(pid, 0.1)
    sampler.start()
    scraper = Scraper(port, 0.25, 15)
    scraper.start()
    end = time.monotonic() + seconds
    next_trickle = time.monotonic()
    while time.monotonic() < end:
        closed = set()
        for key, _ in selector.select(timeout=0.05):
            try:
                if not key.fileobj.recv(65536):
                    closed.add(key.data)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(key.data)
        if time.monotonic() >= next_trickle:
            next_trickle += 1
            for i, s in socks.items():
                try:
                    s.send(prefix if i in pending else b"a")
                    pending.discard(i)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as e:
                    if e.errno != errno.ENOTCONN:
                        closed.add(i)
        for i in closed:
            cuts += 1
            selector.unregister(socks[i])
            socks[i].close()
            reopen(i)
            pending.add(i)
    scraper.stop()
    sampler.stop()
    for s in socks.values():
        s.close()
    result = summary(scraper.latencies, scraper.failures)
    result.update(
        {
            "slow_connections": count,
            "addresses": addresses,
            "seconds": seconds,
            "cut_and_reopened": cuts,
            "server_peak_fds": sampler.peak_fds,
            "server_peak_rss_mb": round(sampler.peak_rss / 2**20, 1),
        }
    )
    return result


def flood_phase(port, pid, total_mb, line_bytes):
    """Sends `total_mb` MB of header lines, reconnecting when cut."""
    line = b"X-Flood: " + b"a" * (line_bytes - 11) + b"\r\n"
    budget = total_mb * 10**6
    sampler = Sampler(pid, 0.02)
    rss_before = vm_rss_bytes(pid)
    hwm_before = vm_bytes(pid, "VmHWM")
    sampler.start()
    sent = connections = cuts = largest = 0
    last_status = None
    start = time.monotonic()
    while sent < budget:
        s = socket.create_connection(("127.0.0.1", port), timeout=30,
                                     source_address=("127.0.2.1", 0))
        connections += 1
        this = 0
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n")
            while sent < budget:
                s.sendall(line)
                sent += len(line)
                this += len(line)
            # Never cut: end the request and read the answer.
            s.sendall(b"\r\n")
            last_status = s.recv(64).split(b"\r\n")[0].decode(errors="replace")
        except OSError:
            cuts += 1
        finally:
            s.close()
            largest = max(largest, this)
    took = time.monotonic() - start
    time.sleep(1)
    sampler.stop()
    return {
        "flood_mb": total_mb,
        "line_bytes": line_bytes,
        "seconds": round(took, 2),
        "connections": connections,
        "cut": cuts,
        "largest_per_connection_kb": round(largest / 1024, 1),
        "uncut_answer": last_status,
        "server_rss_before_mb": round(rss_before / 2**20, 1),
        "server_peak_rss_mb": round(sampler.peak_rss / 2**20, 1),
        "server_rss_after_mb": round(vm_rss_bytes(pid) / 2**20, 1),
        "server_hwm_before_mb": round(hwm_before / 2**20, 1),
        "server_hwm_after_mb": round(vm_bytes(pid, "VmHWM") / 2**20, 1),
    }


def start_server(binary):
    workdir = tempfile.mkdtemp(prefix="http_port_bench.")
    port_file = os.path.join(workdir, "port")
    server = subprocess.Popen([binary, "--port_file", port_file])
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file):
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{binary} did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return server, int(f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("server")
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--addresses", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--flood_mb", type=int, default=200)
    parser.add_argument("--flood_line", type=int, default=8000)
    args = parser.parse_args()
    server, port = start_server(args.server)
    try:
        results = {"idle": idle_scrapes(port)}
        results["slow"] = slow_phase(port, server.pid, args.slow,
                                     args.addresses, args.seconds)
        results["after_slow"] = idle_scrapes(port)
        results["flood"] = flood_phase(port, server.pid, args.flood_mb,
                                       args.flood_line)
        results["after_flood"] = idle_scrapes(port)
        results["server_alive"] = server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    for phase, values in results.items():
        print(f"{phase:12} {values}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
