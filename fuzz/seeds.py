#!/usr/bin/env python3
"""Picks a small seed set for a fuzz target: the fewest inputs (smallest first among equals)
that together reach every coverage edge the given corpus reaches (greedy set cover over the
edges of libFuzzer's merge control file; features such as hit counts are left to the fuzzer to
find again). Copies them into fuzz/corpus/TARGET as min-<sha1 prefix>.

  fuzz/seeds.py TARGET CORPUS_DIR...     (after `cargo fuzz build --sanitizer none`)
"""
import hashlib
import os
import subprocess
import sys
import tempfile

target, corpora = sys.argv[1], sys.argv[2:]
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
triple = "x86_64-unknown-linux-gnu"
base = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "fuzz", "target"))
binary = os.path.join(base, triple, "release", target)
with tempfile.TemporaryDirectory() as tmp:
    control = os.path.join(tmp, "control")
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    subprocess.run([binary, "-merge=1", f"-merge_control_file={control}", empty, *corpora],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = open(control).read().split("\n")
files_count = int(lines[0])
files = lines[2:2 + files_count]
cover = {}
for line in lines[2 + files_count:]:
    parts = line.split()
    if parts and parts[0] == "COV":
        cover[int(parts[1])] = set(map(int, parts[2:]))
left = set().union(*cover.values()) if cover else set()
chosen = []
while left:
    best = max(cover, key=lambda i: (len(cover[i] & left), -os.path.getsize(files[i])))
    if not cover[best] & left:
        break
    chosen.append(best)
    left -= cover[best]
out = os.path.join(root, "fuzz", "corpus", target)
os.makedirs(out, exist_ok=True)
for i in chosen:
    data = open(files[i], "rb").read()
    name = "min-" + hashlib.sha1(data).hexdigest()[:12]
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print(f"{target}: {len(chosen)} seeds cover the {len(set().union(*cover.values()))} edges "
      f"of {len(files)} inputs")
