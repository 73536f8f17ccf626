#!/usr/bin/env bash
# A vessel's history as the crew lives it, over MQTT: the daemon with the
# board-class stand-in diagnoses each alarm, the watchkeeper answers on
# {prefix}/feedback/{equipment}, and the fault's next occurrence is
# diagnosed again, without the crew's notes and with them.
#
#   deploy/bench-history.sh --history FILE [--history FILE ...]
#                           [--model GGUF] [--answers OUT] [--timeout S]
#
# FILE is a history set in the shape `tidewatch eval --notes` reads
# (docs/eval.md, "Vessel histories"; e.g. knowledge/eval/history/*.jsonl).
# Each file gets its own mosquitto on a free loopback port, its own fresh
# state_dir (no notes, nothing warmed) and its own `tidewatch run` (chosen
# answers, threads=2, the stand-in from deploy/fetch-models.sh --standin;
# --model picks another GGUF). One alarm at a time, each once answered:
#   1. every case's later occurrence (`next`), id suffixed `-without`:
#      no notes yet;
#   2. every case's first alarm (`first`), then the crew's verdict on its
#      diagnosis published as feedback JSON: `confirm` cases name the
#      published cause that is the truth's item by its source (or, when the
#      diagnosis did not publish it, give the manual item's words as text);
#      `crew` cases give the crew's own cause and remedy. The bench waits
#      for the site note on {prefix}/notes/# (a refusal on {prefix}/error
#      fails the run);
#   3. every `next` again, under its own id: with the notes.
# It prints, per file, without -> with notes, scored as eval --notes
# scores (src/measure/notes.rs):
#   - coverage right: confirm cases covered with the truth's section among
#     the sources; crew cases not covered;
#   - the confirmed cause ranked first (confirm cases);
#   - the crew's cause offered, marked as a site note (crew cases);
#   - a note shown on another fault's alarm (other cases);
#   - model steps (generated tokens) per alarm, mean, and latency from
#     publish to diagnosis, p50.
# Exits 1 when an alarm goes unanswered within --timeout seconds (default
# 300) or a feedback is refused. --answers writes every diagnosis, one JSON
# line each. TW=path/to/tidewatch measures that build instead of this
# tree's release build.
set -euo pipefail
cd "$(dirname "$0")/.."

files=()
model=""
answers=""
timeout=300
while [ $# -gt 0 ]; do
  case "$1" in
    --history) files+=("$(realpath "$2")"); shift ;;
    --model) model=$2; shift ;;
    --answers) answers=$(realpath -m "$2"); shift ;;
    --timeout) timeout=$2; shift ;;
    -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-history: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#files[@]} -gt 0 ] || { echo "bench-history: --history FILE is required (try --help)" >&2; exit 2; }
for f in "${files[@]}"; do
  [ -s "$f" ] || { echo "bench-history: no cases in $f" >&2; exit 2; }
done

deploy/dev-setup.sh >/dev/null
[ -n "$model" ] || model=$(deploy/fetch-models.sh --standin | tail -n1)
if [ -n "${TW:-}" ]; then tw=$TW; else cargo build --release --quiet; tw=target/release/tidewatch; fi
work=$(mktemp -d /tmp/tidewatch-history.XXXXXX)
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
trap 'stop; rm -rf "$work"' EXIT
"$tw" index build --knowledge knowledge --out "$work/knowledge.twx" >/dev/null
[ -z "$answers" ] || : >"$answers"
# Set in the config, so that a TW= build anywhere reads this tree's
# shipped examples as an installed daemon reads the package's.
examples=$(realpath knowledge/examples/alarms.jsonl)

status=0
for f in "${files[@]}"; do
  run="$work/$(basename "$f" .jsonl)"
  mkdir -p "$run/state"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" >"$run/mosquitto.conf"
  /usr/sbin/mosquitto -c "$run/mosquitto.conf" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  cat >"$run/tidewatch.toml" <<EOF
state_dir = "$run/state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-history-bench"
topic_prefix = "hist"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
examples = "$examples"
[llm]
model = "$model"
threads = 2
EOF
  "$tw" run --config "$run/tidewatch.toml" 2>"$run/daemon.log" &
  pids+=($!)
  for _ in $(seq 1200); do grep -q "tidewatch ready" "$run/daemon.log" && break; sleep 0.1; done
  grep -q "tidewatch ready" "$run/daemon.log" || { cat "$run/daemon.log" >&2; echo "bench-history: daemon never got ready" >&2; exit 1; }
  mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -v -t 'hist/diagnosis/#' -t 'hist/notes/#' -t 'hist/error' >"$run/wire.txt" &
  pids+=($!)
  sleep 0.5
  echo "== $(basename "$f")"
  python3 - "$f" "$port" "$run/wire.txt" "$timeout" "${answers:-}" <<'PY' || status=1
import glob, json, os, re, subprocess, sys, time

path, port, wire, timeout, answers = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
cases = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]

def topic_safe(e):
    return re.sub(r"[/+#]", "-", e)

def stem(doc):
    return doc.rsplit("-", 1)[0] if "-" in doc else doc

def listed(heading):
    return "checks" if ("checks" in heading or "检查" in heading) else "causes"

def item_ref(source):
    # "doc § HEADING #n", as the diagnosis publishes a manual item.
    if not source or " § " not in source:
        return None
    doc, rest = source.split(" § ", 1)
    if " #" not in rest:
        return None
    heading, n = rest.rsplit(" #", 1)
    try:
        n = int(n.strip())
    except ValueError:
        return None
    return (stem(doc.strip()), heading.split()[0].upper(), listed(heading), n)

def truth_ref(t):
    return (stem(t["doc"]), t["section"].split()[0].upper(), listed(t["section"]), t["item"])

def item_words(t):
    """The manual item's own words, for a cause the diagnosis did not publish."""
    for md in glob.glob(f"knowledge/*/{t['doc']}.md"):
        lines = open(md, encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines):
            if line.strip() == f"## {t['section']}":
                body = " ".join(l for l in lines[i + 1:i + 4] if not l.startswith("#"))
                parts = re.split(r"(?:^|[\s：:；;，,（(])(\d+)[)）.]\s*", body)
                for k in range(1, len(parts) - 1, 2):
                    if int(parts[k]) == t["item"]:
                        return parts[k + 1].strip().rstrip("；;。.").strip()
    return None

def wire_lines():
    out = []
    for line in open(wire, encoding="utf-8"):
        # A topic may hold spaces (`NO.1 L.O. PURIFIER`); a payload is a
        # JSON object.
        at = line.find(" {")
        topic, payload = line[:at], line[at + 1:].rstrip("\n")
        try:
            out.append((topic, json.loads(payload)))
        except ValueError:
            pass
    return out

def pub(topic, msg):
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-q", "1",
                    "-t", topic, "-m", json.dumps(msg, ensure_ascii=False)], check=True)

def diagnose(alarm):
    alarm = dict(alarm, equipment=topic_safe(alarm["equipment"]))
    t0 = time.monotonic()
    pub(f"hist/alarm/{alarm['equipment']}", alarm)
    while time.monotonic() - t0 < timeout:
        for topic, d in wire_lines():
            if topic.startswith("hist/diagnosis/") and d.get("alarm_id") == alarm["id"]:
                return d, time.monotonic() - t0
        time.sleep(0.05)
    return None, None

def judge(c, d):
    note_shown = bool(d.get("coverage_note")) or any(p.get("site") for p in d.get("probable_causes", []))
    j = {"coverage_right": False, "confirmed_first": False, "crew_offered": False,
         "note_shown": note_shown, "steps": d.get("timings", {}).get("generated_tokens", 0)}
    t = c.get("truth")
    causes = d.get("probable_causes", [])
    if c["kind"] == "confirm" and t:
        want = truth_ref(t)
        j["coverage_right"] = d.get("coverage") == "covered" and any(
            stem(s.get("doc", "")) == want[0] and (s.get("section") or "").split()[:1] == [want[1]]
            for s in d.get("sources", []))
        j["confirmed_first"] = bool(causes) and item_ref(causes[0].get("source")) == want
    elif c["kind"] == "crew" and t:
        j["coverage_right"] = d.get("coverage") != "covered"
        j["crew_offered"] = any(p.get("cause") == t["text"] and (p.get("source") or "").startswith("site note")
                                for p in causes)
    return j

failed, kept, lat = [], [], {"without": [], "with": []}
judged = {"without": {}, "with": {}}

def later(tag, suffix):
    for c in cases:
        a = dict(c["next"], id=c["next"]["id"] + suffix)
        d, t = diagnose(a)
        if d is None:
            failed.append(f"{c['id']} ({tag}): no diagnosis of {a['id']} within {timeout:g} s")
            continue
        lat[tag].append(t)
        judged[tag][c["id"]] = judge(c, d)
        kept.append({"case": c["id"], "phase": tag, "diagnosis": d})

later("without", "-without")
for c in cases:
    if not c.get("first") or not c.get("truth"):
        continue
    d, _ = diagnose(c["first"])
    if d is None:
        failed.append(f"{c['id']} (first): no diagnosis of {c['first']['id']} within {timeout:g} s")
        continue
    kept.append({"case": c["id"], "phase": "first", "diagnosis": d})
    t = c["truth"]
    fb = {"alarm_id": c["first"]["id"], "verdict": "confirmed", "by": c.get("by") or "crew",
          "ts": c["feedback_ts"]}
    if "text" in t:
        fb["cause"] = {"text": t["text"]}
        if t.get("remedy"):
            fb["remedy"] = t["remedy"]
    else:
        src = next((p["source"] for p in d.get("probable_causes", [])
                    if item_ref(p.get("source")) == truth_ref(t)), None)
        words = None if src else item_words(t)
        if not src and not words:
            failed.append(f"{c['id']}: the truth's item {t} is neither published nor in the manual")
            continue
        fb["cause"] = {"source": src} if src else {"text": words}
    before = len(wire_lines())
    equipment = topic_safe(c["first"]["equipment"])
    pub(f"hist/feedback/{equipment}", fb)
    t0, answer = time.monotonic(), None
    while time.monotonic() - t0 < 30 and answer is None:
        for topic, m in wire_lines()[before:]:
            if topic.startswith("hist/notes/") and (m.get("answered") or {}).get("alarm_id") == c["first"]["id"]:
                answer = "note"
            elif topic == "hist/error" and c["first"]["id"] in json.dumps(m, ensure_ascii=False):
                answer = "refused: " + json.dumps(m, ensure_ascii=False)
        time.sleep(0.05)
    if answer != "note":
        failed.append(f"{c['id']}: feedback on {c['first']['id']} {answer or 'got no answer in 30 s'}")
later("with", "")

def tally(tag):
    js = judged[tag]
    of = lambda k: [c for c in cases if c["kind"] == k and c["id"] in js]
    conf, crew, other = of("confirm"), of("crew"), of("other")
    cov = sum(js[c["id"]]["coverage_right"] for c in conf + crew)
    first = sum(js[c["id"]]["confirmed_first"] for c in conf)
    offered = sum(js[c["id"]]["crew_offered"] for c in crew)
    leaked = sum(js[c["id"]]["note_shown"] for c in other)
    steps = [js[k]["steps"] for k in js]
    l = sorted(lat[tag])
    return {"coverage right": f"{cov}/{len(conf) + len(crew)}",
            "confirmed cause first": f"{first}/{len(conf)}",
            "crew cause offered": f"{offered}/{len(crew)}",
            "notes on other faults": f"{leaked}/{len(other)}",
            "model steps, mean": f"{sum(steps) / max(len(steps), 1):.1f}",
            "latency p50": f"{l[len(l) // 2]:.1f} s" if l else "-"}

w, n = tally("without"), tally("with")
for k in w:
    print(f"  {k}: {w[k]} -> {n[k]}")
misses = [c["id"] for c in cases if c["id"] in judged["with"] and (
    (c["kind"] == "confirm" and not judged["with"][c["id"]]["confirmed_first"])
    or (c["kind"] == "crew" and not judged["with"][c["id"]]["crew_offered"])
    or (c["kind"] == "other" and judged["with"][c["id"]]["note_shown"]))]
# A held-out history whose miss was read is held out no longer: count them.
if misses and os.path.splitext(os.path.basename(path))[0].endswith("held"):
    print(f"  missed with notes: {len(misses)}, not named (a held-out history read is tuning)")
else:
    print(f"  missed with notes: {', '.join(misses) or 'none'}")
if answers:
    with open(answers, "a", encoding="utf-8") as f:
        for k in kept:
            f.write(json.dumps(k, ensure_ascii=False) + "\n")
for m in failed:
    print(f"bench-history: {m}", file=sys.stderr)
sys.exit(1 if failed else 0)
PY
  stop
done
exit $status
