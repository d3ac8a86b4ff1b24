#!/usr/bin/python3
"""Writes the fuzzers' seed corpora: OUT/<harness>/<n> files.

decode: every message of protocol/vectors (valid and invalid);
experiment_config: the example experiment files and a few in NNI's formats;
search_space: the example search spaces and those of the vectors, as MessagePack;
metric_line: a handful of metric lines as trials write them.
Usage: seeds.py --out DIR [--only HARNESS]
"""
import argparse
import glob
import json
import os

import msgpack

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

EXTRA_CONFIGS = [
    "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\n"
    "trialConcurrency: 2\nmaxTrialNumber: 10\ntuner: {name: tpe, classArgs: {seed: 1}}\n",
    "authorName: a\nexperimentName: e\ntrialConcurrency: 1\nmaxTrialNum: 4\n"
    "trainingServicePlatform: local\nsearchSpacePath: s.json\n"
    "tuner: {builtinTunerName: TPE}\ntrial: {command: python3 t.py, codeDir: .}\n",
    "searchSpace:\n  lr: {_type: loguniform, _value: [0.0001, 0.1]}\n"
    "  opt: {_type: choice, _value: [{_name: sgd, m: {_type: uniform, _value: [0, 1]}}, adam]}\n"
    "trialCommand: x\ntuner: {name: random, isolation: process, memoryLimitMb: 64}\n"
    "maxExperimentDuration: 1h\ntunehost: {pluginCallTimeoutMs: 1000, deduplicate: true}\n",
]

METRIC_LINES = [
    b'0.5\n', b'{"value": 0.5}\n', b'{"type": "FINAL", "value": {"default": 0.9, "loss": 0.1}}\n',
    b'{"type": "PERIODICAL", "value": 1e308}\n{"value": NaN}\n', b'\n\n{"value": -1}',
    b'{"type": "LATE", "value": 1}\n', b'{"value": [1, 2]}\n' * 3,
]


def write(out, name, items):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for i, data in enumerate(items):
        with open(os.path.join(d, "seed-%03d" % i), "wb") as f:
            f.write(data)


def vectors():
    out = []
    for name in ("vectors.json", "invalid.json"):
        with open(os.path.join(ROOT, "protocol", "vectors", name)) as f:
            out += json.load(f)
    return out


def search_spaces():
    spaces = []
    for path in glob.glob(os.path.join(ROOT, "examples", "**", "*.json"), recursive=True):
        with open(path) as f:
            try:
                value = json.load(f)
            except ValueError:
                continue
        if isinstance(value, dict):
            spaces.append(value)
    for v in vectors():
        body = v.get("expect", {}).get("body") or {}
        if isinstance(body.get("search_space"), dict):
            spaces.append(body["search_space"])
    return [msgpack.packb(s, use_bin_type=True) for s in spaces]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only")
    args = parser.parse_args()
    corpora = {
        "decode": lambda: [bytes.fromhex(v["hex"]) for v in vectors()],
        "experiment_config": lambda: [
            open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.y*ml"),
                                      recursive=True))] + [c.encode() for c in EXTRA_CONFIGS],
        "search_space": search_spaces,
        "metric_line": lambda: METRIC_LINES,
    }
    for name, make in corpora.items():
        if args.only in (None, name):
            write(args.out, name, make())


if __name__ == "__main__":
    main()
