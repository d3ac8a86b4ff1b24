#!/usr/bin/python3
"""Writes vectors.json and invalid.json next to this file.

Independent of both codecs: every message is a Python dict written in the key
order of protocol/docs/wire-format.md and packed with msgpack directly. The
generated files are checked in; tests read them and never regenerate them.
Re-run after changing a vector:  /usr/bin/python3 protocol/vectors/generate.py
"""

import json
import os

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(obj):
    # Python floats are float64, ints take their smallest form, str is str,
    # bytes is bin: exactly the canonical encoding of wire-format.md §2.
    return msgpack.packb(obj, use_bin_type=True)


def envelope(type_code, msg_id, body):
    return {"v": 1, "type": type_code, "id": msg_id, "body": body}


# ---------------------------------------------------------------- building blocks

SEARCH_SPACE = {
    "lr": {"_type": "loguniform", "_value": [1e-05, 0.1]},
    "batch_size": {"_type": "choice", "_value": [16, 32, 64]},
    "dropout": {"_type": "uniform", "_value": [0.0, 0.5]},
    "optimizer": {"_type": "choice", "_value": ["sgd", "adam"]},
}
PARAMETERS = {
    "lr": 0.0031622776601683794,
    "batch_size": 32,
    "dropout": 0.0,
    "momentum": 1.0,
    "optimizer": "adam",
    "layers": [256, 128, -1],
    "use_bn": True,
    "note": None,
}


def plugin(name, args, isolation=None, memory_limit_mb=None):
    return {"name": name, "args": args, "isolation": isolation, "memory_limit_mb": memory_limit_mb}


def experiment(exp_id, tuner, assessor, concurrency, max_trials, max_duration_s,
               plugin_timeout_s=None):
    return {"id": exp_id, "tuner": tuner, "assessor": assessor, "concurrency": concurrency,
            "max_trials": max_trials, "max_duration_s": max_duration_s,
            "plugin_timeout_s": plugin_timeout_s}


def running(trial_id, attempt, last_sequence):
    return {"trial_id": trial_id, "attempt": attempt, "last_sequence": last_sequence}


def metric_body(trial_id, attempt, parameter_id, mtype, sequence, value, worker_id):
    return {"trial_id": trial_id, "attempt": attempt, "parameter_id": parameter_id, "type": mtype,
            "sequence": sequence, "value": value, "worker_id": worker_id}


def trial_end(trial_id, attempt, status, error, worker_id):
    return {"trial_id": trial_id, "attempt": attempt, "status": status, "error": error,
            "worker_id": worker_id}


def new_trial_job(experiment_id, trial_id, sequence_id, attempt, parameter_id, source, parameters,
                  lease=None):
    return {"experiment_id": experiment_id, "trial_id": trial_id, "sequence_id": sequence_id,
            "attempt": attempt, "parameter_id": parameter_id, "parameter_source": source,
            "parameter_index": 0, "parameters": parameters, "lease": lease}


# ---------------------------------------------------------------- valid messages

VECTORS = []


def vector(name, description, type_code, msg_id, body, wire=None, wire_bytes=None):
    """A valid message. `wire` (a full envelope dict, or `wire_bytes`) is what
    is sent when it is not the canonical form; `body` is then what a decoder
    must produce, and re-encoding gives the canonical form ("canonical_hex")."""
    expect = envelope(type_code, msg_id, body)
    if wire is not None:
        wire_bytes = pack(wire)
    entry = {"name": name, "description": description,
             "hex": (wire_bytes if wire_bytes is not None else pack(expect)).hex()}
    if wire_bytes is not None:
        entry["canonical_hex"] = pack(expect).hex()
    entry["expect"] = expect
    VECTORS.append(entry)


# Control requests.
vector("IN_without_experiment",
       "Initialize with a search space only (NNI style: the experiment is configured elsewhere).",
       "IN", 1, {"search_space": SEARCH_SPACE, "experiment": None})
vector("IN_with_experiment",
       "Initialize with an experiment: random tuner with classArgs, medianstop assessor, "
       "4 concurrent trials, 100 trials, one hour.",
       "IN", 2, {"search_space": SEARCH_SPACE,
                 "experiment": experiment("exp-1", plugin("random", {"seed": 42}),
                                          plugin("org.tunehost.medianstop",
                                                 {"optimize_mode": "maximize",
                                                  "start_step": 5}),
                                          4, 100, 3600.0)})
vector("IN_with_isolated_plugins",
       "Initialize with a tuner in a runner process of its own capped at 512 MiB, an "
       "in-process assessor, and plugin calls limited to 120 s.",
       "IN", 10, {"search_space": SEARCH_SPACE,
                  "experiment": experiment("exp-2",
                                           plugin("tpe", {}, isolation="process",
                                                  memory_limit_mb=512),
                                           plugin("medianstop", {}, isolation="in-process"),
                                           2, 10, 0.0, plugin_timeout_s=120.0)})
vector("IN_with_experiment_no_assessor",
       "Initialize with an experiment whose id the host picks (empty), no assessor, "
       "unlimited trials and time.",
       "IN", 3, {"search_space": {"x": {"_type": "uniform", "_value": [-1.5, 2.5]}},
                 "experiment": experiment("", plugin("grid", {}), None, 1, 0, 0.0)})
vector("GE", "RequestTrialJobs: an NNI-style manager asks for 5 parameter sets.",
       "GE", 4, {"count": 5})
vector("SS", "UpdateSearchSpace: replace the tuner's search space.",
       "SS", 5, {"search_space": {"x": {"_type": "quniform", "_value": [0, 10, 1]}}})
vector("FD",
       "ImportData: two finished results, one with a plain number metric and no trial id, "
       "one with a map metric and a trial id.",
       "FD", 6, {"data": [
           {"parameters": {"x": 1.5, "y": "a"}, "value": 0.25, "trial_id": None},
           {"parameters": {"x": -3, "y": "b"}, "value": {"default": 0.75, "loss": 0.5},
            "trial_id": "imported-7"}]})
vector("AD", "AddCustomizedTrialJob: queue a trial with user-chosen parameters.",
       "AD", 7, {"parameters": PARAMETERS})
vector("TE", "Terminate: the host shuts down after replying ok; empty body.", "TE", 8, {})
vector("PI", "Ping: ask the host for its status; empty body.", "PI", 9, {})

# Control API (wire-format.md §4.2).
vector("ST", "GetStatus: the experiment's ExperimentStatusInfo; empty body.", "ST", 20, {})
vector("LT_filtered_page",
       "ListTrials: the second page of 10 SUCCEEDED trials, in sequence order.",
       "LT", 21, {"status": "SUCCEEDED", "offset": 10, "limit": 10})
vector("LT_all", "ListTrials: every trial (nil status, limit 0 = all).",
       "LT", 22, {"status": None, "offset": 0, "limit": 0})
vector("GT", "GetTrial: one trial's TrialInfo.", "GT", 23, {"trial_id": "T00007"})
vector("JS", "GetStatistics: trial counts by status; empty body.", "JS", 24, {})
vector("LW", "ListWorkers: the workers the host knows; empty body.", "LW", 31, {})
vector("MT_one_trial", "GetMetrics of one trial.", "MT", 25, {"trial_id": "T00007"})
vector("MT_all", "GetMetrics of every trial (nil trial_id).", "MT", 26, {"trial_id": None})
vector("EX", "ExportData: every SUCCEEDED trial's parameters and final metric; empty body.",
       "EX", 27, {})
vector("UX_all",
       "UpdateLimits: 8 trials at once, 200 trials, two hours.",
       "UX", 28, {"concurrency": 8, "max_trials": 200, "max_duration_s": 7200.0})
vector("UX_unlimited_trials",
       "UpdateLimits: only the trial budget changes, to unlimited (0); nil keeps the others.",
       "UX", 29, {"concurrency": None, "max_trials": 0, "max_duration_s": None})
vector("KT", "KillTrial: stop one trial; it ends USER_CANCELED.", "KT", 30,
       {"trial_id": "T00003"})

# Worker -> host.
vector("ME_periodical_number",
       "ReportMetricData: the first PERIODICAL (intermediate) result of a trial, a plain "
       "number, integer parameter id.",
       "ME", 10, metric_body("trial-0001", 0, 0, "PERIODICAL", 0, 0.125, "node1-4242-ab12"))
vector("ME_final_map",
       "ReportMetricData: a FINAL result as a map with the numeric default the algorithms see "
       "plus extra keys; Hyperband-style string parameter id; attempt 1 after a re-offer.",
       "ME", 11, metric_body("trial-0002", 1, "hb-2-3", "FINAL", 7,
                             {"default": 0.9375, "loss": 0.21, "epochs": 8},
                             "node1-4242-ab12"))
vector("ME_customized_nil_id",
       "ReportMetricData sent by a control client (empty worker_id) for a customized trial "
       "(nil parameter id); integer metric.",
       "ME", 12, metric_body("trial-0003", 0, None, "FINAL", 0, 3, ""))
vector("ME_large_sequence",
       "ReportMetricData with a sequence beyond 32 bits and a negative metric.",
       "ME", 13, metric_body("trial-0004", 4294967295, 123456789012, "PERIODICAL",
                             (1 << 40) + 1, -2.5e-300, "w"))
vector("EN_succeeded", "TrialEnd: the trial finished normally.",
       "EN", 14, trial_end("trial-0001", 0, "SUCCEEDED", "", "node1-4242-ab12"))
vector("EN_failed", "TrialEnd: the trial failed; error carries the reason for people.",
       "EN", 15, trial_end("trial-0002", 1, "FAILED", "exit code 1: ValueError: bad lr",
                           "node1-4242-ab12"))
vector("EN_early_stopped",
       "TrialEnd after a KI with reason assessor; sent by a control client (empty worker_id).",
       "EN", 16, trial_end("trial-0005", 0, "EARLY_STOPPED", "", ""))
vector("EN_user_canceled", "TrialEnd: stopped on a KI from a client.",
       "EN", 17, trial_end("trial-0006", 2, "USER_CANCELED", "", "w2"))
vector("EN_sys_canceled", "TrialEnd: the worker stopped the trial while shutting down.",
       "EN", 18, trial_end("trial-0007", 0, "SYS_CANCELED", "worker shutting down", "w2"))
vector("WH",
       "WorkerHello: a worker with 4 slots and one GPU, re-announcing two running trials "
       "(one without PERIODICAL results yet: last_sequence -1).",
       "WH", 1, {"worker_id": "node1-4242-ab12", "slots": 4,
                 "resources": {"gpus": 1, "extra": {"host": "node1", "mem_gb": 64}},
                 "language": "python", "version": "0.1.0",
                 "running": [running("trial-0001", 0, 3), running("trial-0009", 2, -1)],
                 "offers": None, "acks": None})
vector("WH_fresh", "WorkerHello at start: nothing running, no resources beyond one slot.",
       "WH", 1, {"worker_id": "w", "slots": 1, "resources": {"gpus": 0, "extra": {}},
                 "language": "c++", "version": "0.1.0", "running": [], "offers": None,
                 "acks": None})
vector("WH_addressed",
       "WorkerHello of a worker that also takes offers on its events topic (§5.2), so the "
       "host can address each offer to a worker with a free slot.",
       "WH", 1, {"worker_id": "w7", "slots": 2, "resources": {"gpus": 0, "extra": {}},
                 "language": "c++", "version": "0.2.0", "running": [],
                 "offers": "addressed", "acks": None})
vector("WH_ack_spans",
       "WorkerHello of a worker that takes addressed offers and understands an MA's span "
       "(§5.2), so the host may acknowledge consecutive results in one MA.",
       "WH", 1, {"worker_id": "w8", "slots": 1, "resources": {"gpus": 0, "extra": {}},
                 "language": "python", "version": "0.3.0", "running": [],
                 "offers": "addressed", "acks": "spans"})
_wh_old = {"worker_id": "w", "slots": 1, "resources": {"gpus": 0, "extra": {}},
           "language": "python", "version": "0.1.0", "running": []}
vector("WH_without_offers",
       "WorkerHello of a worker written before `offers` was appended: the key is absent, "
       "which means nil (offers reach it through the jobs socket only).",
       "WH", 1, dict(_wh_old, offers=None, acks=None), wire=envelope("WH", 1, _wh_old))
vector("HB", "Heartbeat: 3 of 4 slots free, one trial running.",
       "HB", 2, {"worker_id": "node1-4242-ab12", "free_slots": 3,
                 "running": [running("trial-0001", 0, 300)]})
vector("TS", "TrialStarted: the worker accepted the offer and started the trial, echoing "
       "the offer's lease (TR_algorithm's).",
       "TS", 3, {"worker_id": "node1-4242-ab12", "trial_id": "trial-0001", "attempt": 0,
                 "lease": 0x9E3779B97F4A7C15})
vector("TS_without_lease",
       "TrialStarted from a worker that does not echo leases: nil lease (a host without "
       "keys accepts it, one with keys does not).",
       "TS", 3, {"worker_id": "w", "trial_id": "trial-0001", "attempt": 0, "lease": None})
vector("TJ", "TrialRejected: no free slot; the host re-queues the trial with the same attempt. "
       "The offer's lease is echoed.",
       "TJ", 4, {"worker_id": "node1-4242-ab12", "trial_id": "trial-0002", "attempt": 1,
                 "reason": "no free slot", "lease": 7})
vector("WB", "WorkerBye: the worker is exiting.", "WB", 5, {"worker_id": "node1-4242-ab12"})

# Host -> worker / watchers.
vector("TR_algorithm",
       "NewTrialJob: a tuner-generated trial (integer parameter id) offered to workers, with "
       "the offer's lease (a random 64-bit number the worker echoes in TS).",
       "TR", 1, new_trial_job("exp-1", "trial-0001", 0, 0, 0, "algorithm", PARAMETERS,
                              lease=0x9E3779B97F4A7C15))
vector("TR_hyperband_reoffer",
       "NewTrialJob re-offered as attempt 2 after its lease expired; Hyperband string "
       "parameter id; a new lease.",
       "TR", 300, new_trial_job("exp-1", "trial-0011", 11, 2, "hb-0-1", "algorithm",
                                {"x": 0.5}, lease=7))
vector("TR_customized",
       "NewTrialJob for a trial queued with AD: nil parameter id, source customized.",
       "TR", 70000, new_trial_job("exp-1", "trial-0012", 12, 0, None, "customized",
                                  {"x": 2}))
vector("TR_external",
       "NewTrialJob as a ParameterRecord for a GE client (source external), as published "
       "on event.TR.",
       "TR", 70001, new_trial_job("exp-1", "trial-0013", 13, 0, 13, "external", {}))
vector("TR_resumed", "NewTrialJob for a trial resumed from a previous run.",
       "TR", 70002, new_trial_job("exp-1", "trial-0014", 14, 0, 14, "resumed", {"x": 1.0}))
vector("SP",
       "SendTrialJobParameter: reserved for NNI multi-phase, never sent by v1 hosts; a "
       "NewTrialJob body.",
       "SP", 2, new_trial_job("exp-1", "trial-0001", 0, 0, 0, "algorithm", {"x": 0.5}))
vector("KI_assessor",
       "KillTrialJob: the assessor stopped the trial; the worker answers EN EARLY_STOPPED.",
       "KI", 3, {"trial_id": "trial-0001", "attempt": 0, "reason": "assessor"})
vector("KI_superseded", "KillTrialJob for an attempt that was re-offered meanwhile.",
       "KI", 4, {"trial_id": "trial-0002", "attempt": 1, "reason": "superseded"})
vector("MA", "MetricAck: the host accepted the result with this trial, attempt and sequence.",
       "MA", 5, {"trial_id": "trial-0001", "attempt": 0, "sequence": 3, "span": None})
vector("MA_span",
       "MetricAck of a span (only to a worker whose WH says acks \"spans\"): the results "
       "with sequences 3, 4, 5 and 6 of this trial attempt are accepted.",
       "MA", 6, {"trial_id": "trial-0001", "attempt": 0, "sequence": 3, "span": 4})
vector("HR", "HelloRequest: the host does not know this worker; it answers with WH.",
       "HR", 6, {})
vector("ID", "Initialized event: the experiment has started.",
       "ID", 7, {"experiment_id": "exp-1"})
vector("NO", "NoMoreTrialJobs event: the tuner produced 2 of 5 requested trials.",
       "NO", 8, {"requested": 5, "generated": 2})
vector("ER", "Error event: a plugin failed.",
       "ER", 9, {"code": "plugin_error", "message": "generate_parameters: search space is empty",
                 "source": "tuner:random"})

# Replies.
vector("ok_empty", "ok reply with no data (e.g. to SS, ME, EN, TE).", "ok", 5, {"data": {}})
vector("ok_ping", "ok reply to PI.", "ok", 9,
       {"data": {"status": "RUNNING", "experiment_id": "exp-1"}})
vector("ok_trials", "ok reply to GE: one ParameterRecord and no_more.", "ok", 4,
       {"data": {"trials": [new_trial_job("exp-1", "trial-0013", 13, 0, 13, "external",
                                          {"x": 0.5})],
                 "no_more": True}})
vector("ok_status", "ok reply to ST (and UX): an ExperimentStatusInfo.", "ok", 20,
       {"data": {"experiment_id": "exp-1", "status": "RUNNING", "error": "",
                 "start_time": 1767225600.25, "elapsed_s": 93.5, "concurrency": 2,
                 "max_trials": 10, "max_duration_s": 0.0,
                 "counts": {"RUNNING": 2, "SUCCEEDED": 3, "FAILED": 1},
                 "best": {"trial_id": "T00002", "sequence_id": 2, "metric": 0.9375},
                 "optimize_mode": "maximize",
                 "endpoints": {"control": "tcp://127.0.0.1:5650",
                               "jobs": "tcp://127.0.0.1:5651",
                               "results": "tcp://127.0.0.1:5652",
                               "events": "tcp://127.0.0.1:5653"}}})
TRIAL_INFO = {"trial_id": "T00002", "sequence_id": 2, "parameter_id": 2, "source": "algorithm",
              "status": "SUCCEEDED", "attempt": 0, "worker_id": "node1-4242-ab12",
              "parameters": {"x": 0.5}, "final": {"default": 0.9375, "loss": 0.21},
              "intermediate_count": 3, "start_time": 1767225610.5, "end_time": 1767225650.75,
              "error": ""}
vector("ok_trials_page", "ok reply to LT: total matches and one page of TrialInfo.", "ok", 21,
       {"data": {"total": 2, "trials": [
           TRIAL_INFO,
           {"trial_id": "T00004", "sequence_id": 4, "parameter_id": 4, "source": "customized",
            "status": "WAITING", "attempt": 0, "worker_id": "", "parameters": {"x": 2},
            "final": None, "intermediate_count": 0, "start_time": None, "end_time": None,
            "error": ""}]}})
vector("ok_metrics", "ok reply to MT: MetricRecords by trial, then by sequence.", "ok", 25,
       {"data": {"metrics": [
           {"trial_id": "T00002", "type": "PERIODICAL", "sequence": 0, "value": 0.5},
           {"trial_id": "T00002", "type": "FINAL", "sequence": 1,
            "value": {"default": 0.9375, "loss": 0.21}}]}})
vector("ok_export", "ok reply to EX.", "ok", 27,
       {"data": {"records": [{"trial_id": "T00002", "parameters": {"x": 0.5},
                              "value": {"default": 0.9375, "loss": 0.21}}]}})
vector("error", "error reply: a request that is not valid now.", "error", 4,
       {"code": "bad_state", "message": "GE before IN"})

# Encoding corner cases.
vector("long_strings_and_ids",
       "Multi-byte string headers (str8, str16), UTF-8 text and a 64-bit envelope id.",
       "ER", (1 << 64) - 1, {"code": "internal", "message": "m" * 300,
                             "source": "tuner:" + "\u00e9\u5b66\u4e60" * 12})

# Accepted non-canonical input: `hex` is what a peer may send, `canonical_hex`
# what every encoder writes for the decoded message.
vector("noncanonical_unknown_keys",
       "Keys a decoder does not know (a newer peer of v1 may append them) are ignored, in "
       "the envelope and in the body.",
       "TS", 3, {"worker_id": "w", "trial_id": "t", "attempt": 0, "lease": None},
       wire={"v": 1, "type": "TS", "id": 3,
             "body": {"worker_id": "w", "trial_id": "t", "attempt": 0, "future": [1, 2]},
             "trace": "abc"})
vector("noncanonical_key_order",
       "Decoders look keys up by name: any order is accepted.",
       "MA", 5, {"trial_id": "t", "attempt": 1, "sequence": 2, "span": None},
       wire={"body": {"sequence": 2, "attempt": 1, "trial_id": "t"}, "id": 5, "type": "MA",
             "v": 1})
vector("noncanonical_missing_nil_keys",
       "Optional keys whose canonical value is nil may be left out: experiment, parameter_id.",
       "ME", 6, metric_body("t", 0, None, "FINAL", 1, 0.5, "w"),
       wire=envelope("ME", 6, {"trial_id": "t", "attempt": 0, "type": "FINAL", "sequence": 1,
                               "value": 0.5, "worker_id": "w"}))
vector("noncanonical_integer_float",
       "An integer where a float is expected is accepted and re-encoded as float64.",
       "IN", 7, {"search_space": {},
                 "experiment": experiment("e", plugin("random", {}), None, 1, 0, 60.0)},
       wire=envelope("IN", 7, {"search_space": {},
                               "experiment": experiment("e", plugin("random", {}), None, 1, 0,
                                                        60)}))
# msgpack-python writes every float of a message in one width, so the float32
# is patched in by hand: the metric {"default": 0} becomes {"default": 0.5f}.
vector("noncanonical_float32",
       "float32 values are accepted and re-encoded as float64 (0.5 is exact in both).",
       "ME", 8, metric_body("t", 0, 1, "PERIODICAL", 0, {"default": 0.5}, "w"),
       wire_bytes=bytes.fromhex(pack(envelope("ME", 8, metric_body(
           "t", 0, 1, "PERIODICAL", 0, {"default": 0}, "w"))).hex().replace(
               "a764656661756c7400", "a764656661756c74ca3f000000")))

# ---------------------------------------------------------------- invalid messages

INVALID = []


def invalid(name, description, data, error, field=None, msg_id=0, max_message_bytes=None):
    """`data` is bytes or an object to pack. `id` is the envelope id a decoder
    reports with the error (0 when it cannot be read)."""
    raw = data if isinstance(data, bytes) else pack(data)
    entry = {"name": name, "description": description, "hex": raw.hex(), "error": error}
    if field is not None:
        entry["field"] = field
    entry["id"] = msg_id
    if max_message_bytes is not None:
        entry["max_message_bytes"] = max_message_bytes
    INVALID.append(entry)


def env42(type_code, body):
    return envelope(type_code, 42, body)


PING = pack(envelope("PI", 42, {}))
ME_OK = metric_body("t", 0, 1, "FINAL", 0, 0.5, "w")


def me_with(**changes):
    body = dict(ME_OK)
    for key, value in changes.items():
        if value is KeyError:
            del body[key]
        else:
            body[key] = value
    return env42("ME", body)


def deep_parameters(levels):
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return env42("AD", {"parameters": value})


invalid("empty", "Zero bytes.", b"", "bad_frame")
invalid("not_msgpack", "0xc1 is never used in MessagePack.", b"\xc1", "bad_frame")
invalid("truncated", "A valid PI message missing its last byte.", PING[:-1], "bad_frame")
invalid("trailing_bytes", "A valid PI message followed by one more byte.", PING + b"\x00",
        "bad_frame")
invalid("not_a_map", "An array instead of the envelope map.", [1, "PI", 42, {}], "bad_frame")
invalid("string_root", "A bare string.", "hello", "bad_frame")
invalid("too_deep", "Containers nested 33 deep (decoders allow 32).", deep_parameters(31),
        "bad_frame")
invalid("no_v", "Envelope without the protocol version.",
        {"type": "PI", "id": 42, "body": {}}, "unsupported_version", msg_id=42)
invalid("wrong_v", "Protocol version 2.", {"v": 2, "type": "PI", "id": 42, "body": {}},
        "unsupported_version", msg_id=42)
invalid("v_not_integer", "Version as a string.", {"v": "1", "type": "PI", "id": 42, "body": {}},
        "unsupported_version", msg_id=42)
invalid("no_type", "Envelope without a type.", {"v": 1, "id": 42, "body": {}},
        "missing_field", "envelope.type", 42)
invalid("type_not_string", "Type as an integer.", {"v": 1, "type": 7, "id": 42, "body": {}},
        "bad_field", "envelope.type", 42)
invalid("id_negative", "A negative envelope id.", {"v": 1, "type": "PI", "id": -1, "body": {}},
        "bad_field", "envelope.id")
invalid("no_id", "Envelope without an id: every envelope has all four keys.",
        {"v": 1, "type": "PI", "body": {}}, "missing_field", "envelope.id")
invalid("nil_id", "A nil envelope id: the id is a uint.",
        {"v": 1, "type": "PI", "id": None, "body": {}}, "bad_field", "envelope.id")
invalid("no_body", "Envelope without a body, even for a type with no fields.",
        {"v": 1, "type": "PI", "id": 42}, "missing_field", "envelope.body", 42)
invalid("nil_body", "A nil body: the body is a map ({} when the type has no fields).",
        {"v": 1, "type": "PI", "id": 42, "body": None}, "bad_field", "envelope.body", 42)
invalid("unknown_type", "A type code this version does not define.", env42("XX", {}),
        "unknown_type", msg_id=42)
invalid("body_not_map", "Body as an array.", {"v": 1, "type": "PI", "id": 42, "body": []},
        "bad_field", "envelope.body", 42)
invalid("missing_count", "GE without its required count.", env42("GE", {}),
        "missing_field", "body.count", 42)
invalid("nil_count", "A nil required field counts as missing.", env42("GE", {"count": None}),
        "missing_field", "body.count", 42)
invalid("missing_metric_value", "ME without value.", me_with(value=KeyError),
        "missing_field", "body.value", 42)
invalid("missing_attempt", "TS without attempt.",
        env42("TS", {"worker_id": "w", "trial_id": "t"}), "missing_field", "body.attempt", 42)
invalid("missing_tuner", "IN with an experiment but no tuner.",
        env42("IN", {"search_space": {}, "experiment": {"id": "e"}}),
        "missing_field", "body.experiment.tuner", 42)
invalid("missing_tuner_name", "IN with a tuner without name.",
        env42("IN", {"search_space": {}, "experiment": {"tuner": {"args": {}}}}),
        "missing_field", "body.experiment.tuner.name", 42)
invalid("missing_import_value", "FD with a record without value.",
        env42("FD", {"data": [{"parameters": {}, "trial_id": None}]}),
        "missing_field", "body.data[0].value", 42)
invalid("missing_running_trial_id", "HB whose second running entry has no trial_id.",
        env42("HB", {"worker_id": "w", "free_slots": 0,
                     "running": [running("a", 0, -1), {"attempt": 0, "last_sequence": 0}]}),
        "missing_field", "body.running[1].trial_id", 42)
invalid("count_string", "GE count as a string.", env42("GE", {"count": "5"}),
        "bad_field", "body.count", 42)
invalid("count_negative", "GE count below zero.", env42("GE", {"count": -1}),
        "bad_field", "body.count", 42)
invalid("count_too_big", "GE count beyond 32 bits.", env42("GE", {"count": 1 << 32}),
        "bad_field", "body.count", 42)
invalid("count_bool", "GE count as a boolean.", env42("GE", {"count": True}),
        "bad_field", "body.count", 42)
invalid("count_over_limit", "GE count above the limit of 1024 (§3.2).",
        env42("GE", {"count": 1025}), "bad_field", "body.count", 42)
invalid("count_max_uint32", "GE count 2^32-1: refused before anything is allocated.",
        env42("GE", {"count": (1 << 32) - 1}), "bad_field", "body.count", 42)
invalid("trial_id_too_long", "An identifier longer than 256 bytes.",
        env42("KT", {"trial_id": "t" * 257}), "bad_field", "body.trial_id", 42)
invalid("slots_over_limit", "A worker announcing more than 1024 slots.",
        env42("WH", {"worker_id": "w", "slots": 1025, "resources": None, "language": "",
                     "version": "", "running": []}), "bad_field", "body.slots", 42)
invalid("span_zero", "An MA whose span acknowledges nothing.",
        env42("MA", {"trial_id": "t", "attempt": 0, "sequence": 3, "span": 0}),
        "bad_field", "body.span", 42)
invalid("running_over_limit", "A running list longer than 1024 items (the length is checked "
        "before the items).",
        env42("HB", {"worker_id": "w", "free_slots": 0, "running": [None] * 1025}),
        "bad_field", "body.running", 42)
invalid("parameters_over_limit", "AD parameters with more than 1024 keys.",
        env42("AD", {"parameters": {"k%d" % i: 0 for i in range(1025)}}),
        "bad_field", "body.parameters", 42)
invalid("concurrency_over_limit", "UX concurrency above the limit of 100000.",
        env42("UX", {"concurrency": 100001, "max_trials": None, "max_duration_s": None}),
        "bad_field", "body.concurrency", 42)
invalid("attempt_float", "TS attempt as a float.",
        env42("TS", {"worker_id": "w", "trial_id": "t", "attempt": 1.0}),
        "bad_field", "body.attempt", 42)
invalid("lease_negative", "TS lease as a negative integer.",
        env42("TS", {"worker_id": "w", "trial_id": "t", "attempt": 0, "lease": -1}),
        "bad_field", "body.lease", 42)
invalid("search_space_array", "SS search space as an array.",
        env42("SS", {"search_space": [1, 2]}), "bad_field", "body.search_space", 42)
invalid("metric_type_unknown", "ME type outside PERIODICAL/FINAL.", me_with(type="LATE"),
        "bad_field", "body.type", 42)
invalid("status_unknown", "EN status outside the terminal statuses.",
        env42("EN", trial_end("t", 0, "DONE", "", "w")), "bad_field", "body.status", 42)
invalid("parameter_source_unknown", "TR with an unknown parameter source.",
        env42("TR", new_trial_job("e", "t", 0, 0, 0, "magic", {})),
        "bad_field", "body.parameter_source", 42)
invalid("parameter_id_float", "A parameter id that is neither int, str nor nil.",
        env42("TR", new_trial_job("e", "t", 0, 0, 1.5, "algorithm", {})),
        "bad_field", "body.parameter_id", 42)
invalid("parameter_id_too_big", "A parameter id beyond int64.",
        env42("TR", new_trial_job("e", "t", 0, 0, 1 << 63, "algorithm", {})),
        "bad_field", "body.parameter_id", 42)
invalid("running_not_array", "WH running as a map.",
        env42("WH", {"worker_id": "w", "slots": 1, "resources": None, "language": "",
                     "version": "", "running": {}}), "bad_field", "body.running", 42)
invalid("running_item_not_map", "HB running entry as a string.",
        env42("HB", {"worker_id": "w", "free_slots": 0, "running": ["t"]}),
        "bad_field", "body.running[0]", 42)
invalid("last_sequence_string", "RunningTrial last_sequence as a string.",
        env42("HB", {"worker_id": "w", "free_slots": 0, "running": [running("t", 0, "3")]}),
        "bad_field", "body.running[0].last_sequence", 42)
invalid("concurrency_zero", "An experiment must allow at least one trial at once.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}), None, 0, 0, 0.0)}),
        "bad_field", "body.experiment.concurrency", 42)
invalid("max_duration_negative", "A negative time budget.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}), None, 1, 0, -1.0)}),
        "bad_field", "body.experiment.max_duration_s", 42)
invalid("max_duration_nan", "NaN is not a time budget.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}), None, 1, 0,
                                              float("nan"))}),
        "bad_field", "body.experiment.max_duration_s", 42)
invalid("isolation_unknown", "A plugin isolation that is neither in-process nor process.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}, isolation="thread"),
                                              None, 1, 0, 0.0)}),
        "bad_field", "body.experiment.tuner.isolation", 42)
invalid("memory_limit_over_limit", "A runner memory cap above 1 TiB.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}, isolation="process",
                                                         memory_limit_mb=(1 << 20) + 1),
                                              None, 1, 0, 0.0)}),
        "bad_field", "body.experiment.tuner.memory_limit_mb", 42)
invalid("plugin_timeout_zero", "A plugin call limit of zero.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}), None, 1, 0, 0.0,
                                              plugin_timeout_s=0.0)}),
        "bad_field", "body.experiment.plugin_timeout_s", 42)
invalid("assessor_not_map", "The assessor as a string.",
        env42("IN", {"search_space": {},
                     "experiment": experiment("", plugin("random", {}), "medianstop", 1, 0,
                                              0.0)}),
        "bad_field", "body.experiment.assessor", 42)
invalid("metric_map_without_default", "A metric map needs a numeric default.",
        me_with(value={"loss": 0.5}), "bad_field", "body.value", 42)
invalid("metric_default_string", "A metric map whose default is not a number.",
        me_with(value={"default": "0.5"}), "bad_field", "body.value", 42)
invalid("metric_string", "A metric that is a string.", me_with(value="0.5"),
        "bad_field", "body.value", 42)
invalid("metric_bool", "A metric that is a boolean.", me_with(value=True),
        "bad_field", "body.value", 42)
invalid("import_metric_bad", "FD record whose metric map lacks default.",
        env42("FD", {"data": [{"parameters": {}, "value": {"x": 1}, "trial_id": None}]}),
        "bad_field", "body.data[0].value", 42)
invalid("list_status_unknown", "LT status filter that is not a trial status.",
        env42("LT", {"status": "DONE", "offset": 0, "limit": 0}), "bad_field", "body.status", 42)
invalid("list_offset_negative", "LT offset below zero.",
        env42("LT", {"status": None, "offset": -1, "limit": 0}), "bad_field", "body.offset", 42)
invalid("get_trial_missing_id", "GT without trial_id.", env42("GT", {}),
        "missing_field", "body.trial_id", 42)
invalid("metrics_trial_id_integer", "MT trial_id as an integer.", env42("MT", {"trial_id": 7}),
        "bad_field", "body.trial_id", 42)
invalid("kill_missing_id", "KT with a nil trial_id.", env42("KT", {"trial_id": None}),
        "missing_field", "body.trial_id", 42)
invalid("update_concurrency_zero", "UX concurrency 0: at least one trial must run at once.",
        env42("UX", {"concurrency": 0, "max_trials": None, "max_duration_s": None}),
        "bad_field", "body.concurrency", 42)
invalid("update_max_trials_string", "UX max_trials as a string.",
        env42("UX", {"concurrency": None, "max_trials": "10", "max_duration_s": None}),
        "bad_field", "body.max_trials", 42)
invalid("update_max_duration_negative", "UX with a negative time budget.",
        env42("UX", {"concurrency": None, "max_trials": None, "max_duration_s": -5.0}),
        "bad_field", "body.max_duration_s", 42)
invalid("update_max_duration_infinite", "UX with an infinite time budget (0 means unlimited).",
        env42("UX", {"concurrency": None, "max_trials": None,
                     "max_duration_s": float("inf")}),
        "bad_field", "body.max_duration_s", 42)
invalid("oversize", "A valid PI message larger than a 16-byte limit.", PING, "too_large",
        max_message_bytes=16)
invalid("oversize_by_one", "A valid PI message one byte larger than the limit.", PING,
        "too_large", max_message_bytes=len(PING) - 1)


def write(name, entries):
    with open(os.path.join(HERE, name), "w", encoding="ascii") as f:
        json.dump(entries, f, indent=1, ensure_ascii=True, allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    write("vectors.json", VECTORS)
    write("invalid.json", INVALID)
    print(f"wrote {len(VECTORS)} vectors and {len(INVALID)} invalid messages")
