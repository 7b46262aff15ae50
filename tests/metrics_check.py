#!/usr/bin/python3
"""Checks a scrape of an Aqueduct daemon's /metrics with Debian's
prometheus_client parser (python3-prometheus-client): the families exist
with their types, histogram buckets are cumulative with +Inf equal to the
count, and the job's figures are consistent.

  metrics_check.py coordinator FILE JOB STAGES [--final STEPS]
  metrics_check.py worker FILE JOB [--final STEPS]

Exit 0 when every check passes; otherwise prints each failure and exits 1.
"""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def parse(path):
    with open(path) as f:
        text = f.read()
    families = {}
    for family in text_string_to_metric_families(text):
        check(family.name not in families, "family %s twice" % family.name)
        families[family.name] = family
    return families


def expect_types(families, types):
    for name, kind in types.items():
        f = families.get(name)
        check(f is not None, "no family %s" % name)
        if f is not None:
            check(f.type == kind, "%s is %s, want %s" % (name, f.type, kind))


def samples(families, family, name, **labels):
    """{label tuple: value} of samples `name` of `family` matching labels."""
    out = {}
    f = families.get(family)
    if f is None:
        return out
    for s in f.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            out[tuple(sorted(s.labels.items()))] = s.value
    return out


def check_histograms(families, name):
    f = families.get(name)
    if f is None:
        return
    series = {}
    for s in f.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        series.setdefault(key, {"buckets": [], "count": None})
        if s.name == name + "_bucket":
            series[key]["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name == name + "_count":
            series[key]["count"] = s.value
    check(series, "%s has no series" % name)
    for key, h in series.items():
        buckets = sorted(h["buckets"])
        values = [v for _, v in buckets]
        check(values == sorted(values), "%s%s buckets not cumulative: %s" % (name, key, buckets))
        check(buckets and math.isinf(buckets[-1][0]), "%s%s has no +Inf bucket" % (name, key))
        check(buckets and buckets[-1][1] == h["count"],
              "%s%s +Inf %s != count %s" % (name, key, buckets[-1][1] if buckets else None, h["count"]))


def check_prefixes(families, forbidden):
    for name in families:
        check(not name.startswith(forbidden),
              "family %s has a prefix another daemon's families use" % name)


def one(values, what):
    check(len(values) == 1, "%s: want one sample, got %s" % (what, values))
    return next(iter(values.values())) if values else 0


def check_coordinator(families, job, stages, final_steps):
    expect_types(families, {
        "aqueduct_job_state": "gauge", "aqueduct_job_steps": "gauge",
        "aqueduct_job_samples_per_second": "gauge", "aqueduct_job_loss": "gauge",
        "aqueduct_job_restarts": "counter", "aqueduct_stage_compute_seconds": "counter",
        "aqueduct_stage_communication_seconds": "counter",
        "aqueduct_stage_idle_seconds": "counter", "aqueduct_stage_sent_bytes": "counter",
        "aqueduct_stage_received_bytes": "counter",
        "aqueduct_stage_stashed_activation_bytes": "gauge",
        "aqueduct_coordinator_worker_up": "gauge",
        "aqueduct_coordinator_worker_heartbeats": "counter",
        "aqueduct_stage_step_duration_seconds": "histogram",
        "aqueduct_coordinator_worker_last_heartbeat_timestamp_seconds": "gauge",
        "aqueduct_job_samples": "counter", "aqueduct_build_info": "gauge",
        "aqueduct_coordinator_worker_device_memory_bytes": "gauge",
        "aqueduct_coordinator_rpc_duration_seconds": "histogram",
        "aqueduct_coordinator_rpcs": "counter",
        "process_cpu_seconds": "counter", "process_resident_memory_bytes": "gauge",
        "process_start_time_seconds": "gauge",
    })
    check_histograms(families, "aqueduct_coordinator_rpc_duration_seconds")
    check_histograms(families, "aqueduct_stage_step_duration_seconds")
    # One prefix meaning per daemon: aqueduct_worker_* is the worker's own.
    check_prefixes(families, forbidden=("aqueduct_worker_",))
    hb = samples(families, "aqueduct_coordinator_rpc_duration_seconds",
                 "aqueduct_coordinator_rpc_duration_seconds_count", method="Heartbeat", code="OK")
    check(one(hb, "Heartbeat OK count") > 0, "no Heartbeat in the RPC histogram")
    beats = samples(families, "aqueduct_coordinator_worker_heartbeats",
                    "aqueduct_coordinator_worker_heartbeats_total")
    check(len(beats) == 2 and all(v > 0 for v in beats.values()), "heartbeats per worker: %s" % beats)
    up = samples(families, "aqueduct_coordinator_worker_up", "aqueduct_coordinator_worker_up")
    check(sorted(up.values()) == [1, 1], "workers up: %s" % up)
    sent, received = {}, {}
    for stage in range(stages):
        st = str(stage)
        # The worker runtime reports bytes when a stage ends its run
        # (worker/runtime/stage_job.cc): > 0 only at the end.
        counted = ("compute_seconds",) if final_steps is None else (
            "compute_seconds", "sent_bytes", "received_bytes")
        for family in counted:
            name = "aqueduct_stage_" + family
            v = one(samples(families, name, name + "_total", job=job, stage=st), "%s stage %s" % (name, st))
            check(v > 0, "%s of stage %s is %s" % (name, st, v))
        sent[stage] = one(samples(families, "aqueduct_stage_sent_bytes", "aqueduct_stage_sent_bytes_total",
                                  job=job, stage=st), "sent")
        received[stage] = one(samples(families, "aqueduct_stage_received_bytes",
                                      "aqueduct_stage_received_bytes_total", job=job, stage=st), "received")
    steps = one(samples(families, "aqueduct_job_steps", "aqueduct_job_steps", job=job), "steps")
    check(steps > 0, "job steps %s" % steps)
    if final_steps is not None:
        check(steps == final_steps, "job steps %s, want %s" % (steps, final_steps))
        state = samples(families, "aqueduct_job_state", "aqueduct_job_state", job=job)
        check(any(dict(k)["state"] == "SUCCEEDED" for k in state), "job state %s" % state)
        # What stage 0 sent (activations) stage 1 received, and back.
        check(sent[0] == received[1], "stage 0 sent %s, stage 1 received %s" % (sent[0], received[1]))
        check(sent[1] == received[0], "stage 1 sent %s, stage 0 received %s" % (sent[1], received[0]))
        for stage in range(stages):
            mb = one(samples(families, "aqueduct_stage_minibatches", "aqueduct_stage_minibatches",
                             job=job, stage=str(stage)), "minibatches")
            check(mb == final_steps, "stage %d minibatches %s, want %s" % (stage, mb, final_steps))


def check_worker(families, job, final_steps):
    expect_types(families, {
        "aqueduct_worker_heartbeats_sent": "counter", "aqueduct_worker_heartbeats_failed": "counter",
        "aqueduct_worker_coordinator_reachable": "gauge",
        "aqueduct_worker_stage_compute_seconds": "counter",
        "aqueduct_worker_stage_sent_bytes": "counter", "aqueduct_worker_stage_minibatches": "gauge",
        "process_cpu_seconds": "counter", "process_resident_memory_bytes": "gauge",
        "aqueduct_build_info": "gauge",
    })
    check_prefixes(families, forbidden=("aqueduct_coordinator_", "aqueduct_job_", "aqueduct_stage_"))
    sent = one(samples(families, "aqueduct_worker_heartbeats_sent", "aqueduct_worker_heartbeats_sent_total"),
               "heartbeats sent")
    check(sent > 0, "heartbeats sent %s" % sent)
    reach = one(samples(families, "aqueduct_worker_coordinator_reachable",
                        "aqueduct_worker_coordinator_reachable"), "reachable")
    check(reach == 1, "coordinator reachable %s" % reach)
    compute = samples(families, "aqueduct_worker_stage_compute_seconds",
                      "aqueduct_worker_stage_compute_seconds_total", job=job)
    check(len(compute) == 1 and all(v > 0 for v in compute.values()), "stage compute %s" % compute)
    if final_steps is not None:
        mb = samples(families, "aqueduct_worker_stage_minibatches", "aqueduct_worker_stage_minibatches", job=job)
        check(list(mb.values()) == [final_steps], "worker minibatches %s, want %s" % (mb, final_steps))


def main(argv):
    kind, path, job = argv[1], argv[2], argv[3]
    rest = argv[4:]
    final_steps = None
    if "--final" in rest:
        final_steps = float(rest[rest.index("--final") + 1])
    families = parse(path)
    if kind == "coordinator":
        check_coordinator(families, job, int(rest[0]), final_steps)
    else:
        check_worker(families, job, final_steps)
    for f in failures:
        print("metrics_check: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
