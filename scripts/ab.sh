#!/usr/bin/env bash
# A/B of this checkout against an earlier revision on the quick benchmarks (copy, fs, mount,
# mix: every policy of every case), to show that a
# change leaves the figures where they were:
#
#   bash scripts/ab.sh REV [bench ...]      (default benches: copy fs mount)
#
# Builds REV in a temporary worktree, then runs each benchmark `--quick --json` four times,
# alternating the binaries old, new, new, old (ABBA), and prints per benchmark the median
# over points of new ÷ old throughput (each binary's two runs averaged per point), with the
# second-pass ÷ first-pass ratio of both binaries together as the A/A control: a new ÷ old
# inside the A/A spread is noise. Takes about 25 minutes for the three default benchmarks on
# a 2-core machine; run it on a quiet one.
set -euo pipefail
rev=${1:?usage: scripts/ab.sh REV [bench ...]}
shift
benches=("${@:-copy fs mount}")
read -r -a benches <<<"${benches[*]}"
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "$rev"
echo "building $rev and this checkout (release)" >&2
# `switchyard bench` runs switchyard-bench from beside it (a library only before it had a
# program of its own). Two cargo commands, so the product is built without the benchmarks'
# features.
build() { cargo build --release -q -p switchyard && cargo build --release -q -p switchyard-bench; }
(cd "$work/old" && CARGO_TARGET_DIR="$work/old-target" build)
build
old="$work/old-target/release/switchyard"
new="$root/target/release/switchyard"
mkdir -p "$work/run"
for b in "${benches[@]}"; do
  for tag in old1 new1 new2 old2; do
    bin=$old
    [[ $tag == new* ]] && bin=$new
    echo "$(date +%T) bench $b: $tag" >&2
    (cd "$work/run" && "$bin" bench "$b" --quick --json >"$work/$b-$tag.json")
  done
done
python3 - "$work" "${benches[@]}" <<'EOF'
import json, statistics, sys

work, benches = sys.argv[1], sys.argv[2:]

def points(bench, tag):
    """Throughput per point of one run, keyed by everything that names the point."""
    out = {}
    for line in open(f"{work}/{bench}-{tag}.json"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("summary") or r.get("record") == "summary":
            continue
        if bench == "copy":
            if r.get("path") not in ("cpu", "engine", "scheduled"):
                continue
            key, value = (r["path"], r["direction"], r["size"], r["threads"], r.get("shift")), r["gib_per_s"]
        elif bench == "mix":
            for policy, v in r.get("gib_s", []):
                out[(r["workload"], r["direction"], r["threads"], policy)] = v
            continue
        elif "store_gib_s" in r:
            key = tuple(sorted((k, str(v)) for k, v in r.items() if not isinstance(v, float)))
            value = r["store_gib_s"]
        else:
            continue
        out[key] = value
    return out

for b in benches:
    o1, o2, n1, n2 = (points(b, t) for t in ("old1", "old2", "new1", "new2"))
    keys = [k for k in o1 if k in o2 and k in n1 and k in n2 and o1[k] > 0 and o2[k] > 0]
    ab = [(n1[k] + n2[k]) / (o1[k] + o2[k]) for k in keys]
    aa = [(o2[k] + n2[k]) / (o1[k] + n1[k]) for k in keys]
    q = statistics.quantiles(ab, n=4) if len(ab) > 1 else [ab[0]] * 3
    print(f"{b}: new ÷ old {statistics.median(ab):.3f} over {len(keys)} points "
          f"(quartiles {q[0]:.3f}–{q[2]:.3f}); A/A second ÷ first pass {statistics.median(aa):.3f}")
EOF
