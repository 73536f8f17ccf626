#!/usr/bin/env bash
# Coverage as an engineer meets it: labelled alarms sent to the
# daemon over MQTT with the board-class stand-in, one at a time, each
# diagnosis read back from the broker and scored.
#
#   deploy/bench-coverage.sh --cases FILE [--model GGUF] [--answers OUT]
#                            [--state-dir DIR] [--examples FILE] [--no-warm]
#
# FILE holds labelled alarms in the eval set's shape (one JSON object per
# line: `case`, `coverage` covered|related|none, `alarm`, and for covered
# ones `keywords`), e.g. a blind set or knowledge/eval/alarms.jsonl. Starts
# its own mosquitto on a free loopback port and `tidewatch run` (chosen
# answers, threads=2) with the stand-in (deploy/fetch-models.sh --standin;
# --model picks another GGUF), publishes each alarm on
# {prefix}/alarm/{equipment} once the previous one is answered, and prints:
#   - answered: every alarm must get a diagnosis within 180 s;
#   - uncovered (truth related or none) said related or none with no cause
#     rated high, and the same on equipment with a manual;
#   - covered under plant codes (a code no manual section has) said covered;
#   - expected cause named: a covered alarm's keyword (`en|中文`) in a cause;
#   - the fault's own section (its gold section's code) among the sources;
#   - each alarm's cost on a Cortex-A72, projected from its token counts;
#     a degraded answer (the model and its fallback both failed) has none:
#     it is counted, with the daemon's reasons, and not projected;
#   - the same per writer when the cases carry `writer`;
#   - latency from publish to diagnosis, p50 and max.
# --answers writes each case's diagnosis, one JSON line per case.
# --examples sets the daemon's knowledge.examples (default: this tree's
# shipped examples, knowledge/examples/alarms.jsonl, set in the config so
# that a TW= build anywhere reads them too; never the eval set).
# Before the daemon starts, `tidewatch warm` precomputes the manuals' prompt
# states as install.sh does, so latency is a warmed board's; --state-dir
# keeps them for the next run (default: a temp dir, warmed afresh). --no-warm
# skips it: the judgements are the same, latency is a cold board's.
# Exits 1 when an alarm goes unanswered. TW=path/to/tidewatch measures that
# build instead of this tree's release build.
set -euo pipefail
cd "$(dirname "$0")/.."

cases=""
model=""
answers=""
state=""
examples=""
warm=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) cases=$2; shift ;;
    --model) model=$2; shift ;;
    --answers) answers=$2; shift ;;
    --state-dir) state=$2; shift ;;
    --examples) examples=$(realpath "$2"); shift ;;
    --no-warm) warm=0 ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-coverage: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$cases" ] || { echo "bench-coverage: --cases FILE is required (try --help)" >&2; exit 2; }
[ -s "$cases" ] || { echo "bench-coverage: no cases in $cases" >&2; exit 2; }
cases=$(realpath "$cases")
[ -n "$examples" ] || examples=$(realpath knowledge/examples/alarms.jsonl)

deploy/dev-setup.sh >/dev/null
[ -n "$model" ] || model=$(deploy/fetch-models.sh --standin | tail -n1)
if [ -n "${TW:-}" ]; then tw=$TW; else cargo build --release --quiet; tw=target/release/tidewatch; fi
work=$(mktemp -d /tmp/tidewatch-coverage.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$tw" index build --knowledge knowledge --out "$work/knowledge.twx" >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" >"$work/mosquitto.conf"
/usr/sbin/mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done

[ -n "$state" ] || state="$work/state"
mkdir -p "$state"
cat >"$work/tidewatch.toml" <<EOF
state_dir = "$state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-coverage-bench"
topic_prefix = "cov"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
${examples:+examples = \"$examples\"}
[llm]
model = "$model"
threads = 2
EOF
if [ "$warm" = 1 ]; then
  echo "bench-coverage: tidewatch warm (skips what $state holds)" >&2
  "$tw" warm --config "$work/tidewatch.toml" >&2
fi
"$tw" run --config "$work/tidewatch.toml" 2>"$work/daemon.log" &
pids+=($!)
for _ in $(seq 1200); do grep -q "tidewatch ready" "$work/daemon.log" && break; sleep 0.1; done
grep -q "tidewatch ready" "$work/daemon.log" || { cat "$work/daemon.log" >&2; echo "bench-coverage: daemon never got ready" >&2; exit 1; }

mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -t 'cov/diagnosis/#' >"$work/diagnoses.jsonl" &
pids+=($!)
sleep 0.5

python3 - "$cases" "$port" "$work/diagnoses.jsonl" "${answers:-}" "$work/daemon.log" <<'PY'
import collections, glob, json, re, subprocess, sys, time

cases_file, port, out, answers, log = sys.argv[1:6]
manual_codes = set()
for path in glob.glob("knowledge/*/*.md"):
    for line in open(path, encoding="utf-8"):
        m = re.match(r"##\s+(\S+)\s+(causes|原因)", line)
        if m:
            manual_codes.add(m.group(1).upper())
cases = [json.loads(l) for l in open(cases_file, encoding="utf-8") if l.strip()]

def read_answers():
    got = {}
    for line in open(out, encoding="utf-8"):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        got[d.get("alarm_id")] = d
    return got

lat, rows, missing = [], [], []
for c in cases:
    a = c["alarm"]
    t0 = time.monotonic()
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-q", "1",
                    "-t", f"cov/alarm/{a['equipment']}", "-m", json.dumps(a, ensure_ascii=False)],
                   check=True)
    d = None
    while time.monotonic() - t0 < 180:
        d = read_answers().get(a["id"])
        if d:
            break
        time.sleep(0.05)
    if not d:
        missing.append(c["case"])
        continue
    lat.append(time.monotonic() - t0)
    rows.append((c, d))

def share(n, k):
    return f"{n}/{k}"

unc = [(c, d) for c, d in rows if c.get("coverage") in ("related", "none")]
unc_ok = [(c, d) for c, d in unc
          if d.get("coverage") in ("related", "none")
          and not any(p.get("likelihood") == "high" for p in d.get("probable_causes", []))]
unc_man = [(c, d) for c, d in unc if c.get("coverage") == "related"]
unc_man_ok = [x for x in unc_ok if x[0].get("coverage") == "related"]
plant = [(c, d) for c, d in rows
         if c.get("coverage", "covered") == "covered" and c["alarm"]["code"].upper() not in manual_codes]
plant_ok = [x for x in plant if x[1].get("coverage") == "covered"]
keyed = [(c, d) for c, d in rows if c.get("coverage", "covered") == "covered" and c.get("keywords")]
def cause_named(c, d):
    text = " ".join(p.get("cause", "") for p in d.get("probable_causes", [])).lower()
    return any(alt.strip().lower() in text for k in c["keywords"] for alt in k.split("|") if alt.strip())
named = sum(1 for c, d in keyed if cause_named(c, d))
def own_section(c, d):
    gold = (c.get("gold") or {}).get("section", "")
    code = gold.split()[0].upper() if gold else ""
    return bool(code) and any(
        (s.get("section") or "").split()[:1] == [code] for s in d.get("sources", []))
cov = [(c, d) for c, d in rows if c.get("coverage", "covered") == "covered" and c.get("gold")]
sections = sum(1 for c, d in cov if own_section(c, d))
# A first occurrence on a Cortex-A72 without dot-product kernels: every
# prompt token read (not found cached) and fed at 6/s, every chosen one at
# 3.5/s.
A72_READ, A72_GEN = 6.0, 3.5
def a72(d):
    t = d.get("timings", {})
    read = t.get("prompt_tokens", 0) - t.get("cached_tokens", 0) + t.get("fed_tokens", 0)
    return read / A72_READ + t.get("generated_tokens", 0) / A72_GEN
# A degraded answer (the model's answer and its fallback both failed) carries
# no token counts, though the board spent its time on both: it is counted,
# with the daemon's reasons, and left out of the projection rather than
# projected as free.
degraded = [(c, d) for c, d in rows if d.get("mode") == "degraded"]
projected = [(c, d) for c, d in rows if d.get("mode") != "degraded"]
proj = sorted(a72(d) for c, d in projected)
writers = sorted({c.get("writer", "") for c, d in rows})
table = {t: {s: 0 for s in ("covered", "related", "none")} for t in ("covered", "related", "none")}
for c, d in rows:
    table[c.get("coverage", "covered")][d.get("coverage", "covered")] += 1
lat.sort()
print(f"answered: {share(len(rows), len(cases))}")
for t in ("covered", "related", "none"):
    r = table[t]
    print(f"truth {t}: said covered {r['covered']}, related {r['related']}, none {r['none']}")
print(f"uncovered said related/none, no cause high: {share(len(unc_ok), len(unc))} "
      f"(on equipment with a manual {share(len(unc_man_ok), len(unc_man))})")
print(f"covered under plant codes said covered: {share(len(plant_ok), len(plant))}")
print(f"expected cause named: {share(named, len(keyed))}")
print(f"the fault's own section among the sources: {share(sections, len(cov))}")
reasons = collections.Counter()
for line in open(log, encoding="utf-8", errors="replace"):
    if "fallback" not in line or "reason=" not in line:
        continue
    why = re.sub(r"\x1b\[[0-9;]*m", "", line.split("reason=", 1)[1]).strip().strip('"')
    reasons[re.split(r" \w+=|[(:]", why)[0].strip()[:60]] += 1
print(f"degraded (the model's answer and its fallback failed; answered from the manuals): "
      f"{len(degraded)}/{len(rows)}"
      + (f"; the daemon's reasons: {', '.join(f'{r} x{n}' for r, n in reasons.most_common())}"
         if reasons else ""))
if proj:
    print(f"A72 projection per alarm (read+fed)/{A72_READ:g} + chosen/{A72_GEN:g}, "
          f"the {len(proj)} not degraded: "
          f"mean {sum(proj) / len(proj):.1f} s, p50 {proj[len(proj) // 2]:.1f} s, max {proj[-1]:.1f} s")
if len(writers) > 1:
    for w in writers:
        mine = [(c, d) for c, d in rows if c.get("writer", "") == w]
        wc = [(c, d) for c, d in mine if c.get("coverage", "covered") == "covered"]
        wu = [(c, d) for c, d in mine if c.get("coverage") in ("related", "none")]
        wk = [(c, d) for c, d in wc if c.get("keywords")]
        wp = [a72(d) for c, d in mine if d.get("mode") != "degraded"]
        print(f"  writer {w or '-'}: covered said covered {sum(1 for c, d in wc if d.get('coverage') == 'covered')}/{len(wc)}, "
              f"own section {sum(1 for c, d in wc if own_section(c, d))}/{len(wc)}, "
              f"expected cause {sum(1 for c, d in wk if cause_named(c, d))}/{len(wk)}, "
              f"uncovered said related/none, no cause high "
              f"{sum(1 for x in wu if x in unc_ok)}/{len(wu)}, "
              f"A72 mean {sum(wp) / max(len(wp), 1):.1f} s"
              f"{f' ({len(mine) - len(wp)} degraded)' if len(wp) < len(mine) else ''}")
if lat:
    print(f"latency: p50 {lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s")
if answers:
    with open(answers, "w", encoding="utf-8") as f:
        for c, d in rows:
            f.write(json.dumps({"case": c["case"], "diagnosis": d}, ensure_ascii=False) + "\n")
if missing:
    print(f"bench-coverage: no diagnosis within 180 s for {', '.join(missing)}", file=sys.stderr)
    sys.exit(1)
PY
