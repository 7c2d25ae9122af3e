#!/usr/bin/env bash
# The main job on the bundled example: validate a whole Source's document tree, list it, and
# show how hostile or broken documents are reported. Run by `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Everything started or made here goes at the end, however the script ends.
pids=()
dirs=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for dir in "${dirs[@]}"; do rm -rf "$dir" || true; done
}
trap cleanup EXIT

step "Validate the example Source, following every link down from its Source Description"
resourcesync validate --follow examples/site/.well-known/resourcesync \
  --map http://example.org/=examples/site

step "List the Resource List (an index over two parts) as a table"
resourcesync cat --follow examples/site/dataset1/resourcelist.xml \
  --map http://example.org/=examples/site

step "The same as JSON Lines, for scripts"
resourcesync cat examples/site/dataset1/changelist.xml --json

step "Broken and hostile documents: findings with locations, exit code 1 or 2, no traceback"
set +e
resourcesync validate examples/broken/changelist-out-of-order.xml
echo "exit code: $?"
resourcesync validate examples/broken/xxe.xml
echo "exit code: $?"
set -e

step "The main job, end to end: publish the bundled tree, serve it, and keep a copy in step"
work=$(mktemp -d); dirs+=("$work")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
site="http://127.0.0.1:$port/"
cp -r examples/resources "$work/resources"
caps=resourcelist,changelist,resourcedump,changedump
resourcesync publish "$work/resources" --base-url "${site}files/" --out "$work/public" \
  --capabilities "$caps" --hash md5,sha-256
resourcesync validate --follow "$work/public/.well-known/resourcesync" --map "$site=$work/public"
resourcesync serve "$work/public" --port "$port" --log-level warning 2>"$work/serve.log" &
server=$!; pids+=("$server")
python3 - "$site" <<'WAIT'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(sys.argv[1] + ".well-known/resourcesync", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
WAIT

step "Baseline: discover the Source from its site root and copy it (from its dump packages)"
resourcesync sync "$site" "$work/copy"
find "$work/copy" -type f -not -path '*/.resourcesync/*' | sed "s|$work/||" | sort

step "Change the tree (edit, add, delete, touch), publish again: only the changes are listed"
echo '<p>edited</p>' >> "$work/resources/articles/welcome.html"
echo 'new' > "$work/resources/data/new.txt"
rm "$work/resources/articles/notes.md"
touch "$work/resources/data/people.csv"
resourcesync publish "$work/resources" --base-url "${site}files/" --out "$work/public" \
  --capabilities "$caps" --hash md5,sha-256
resourcesync cat "${site}resourcesync/changelist.xml"

step "Incremental sync (deletions applied with --delete), then an audit"
resourcesync sync "$site" "$work/copy" --delete
resourcesync audit "$site" "$work/copy"

step "Summary"
echo "source: $(find "$work/resources" -type f | wc -l) files; copy: $(find "$work/copy" -type f -not -path '*/.resourcesync/*' | wc -l) files; audit: in sync"
kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true

step "Change Notification: a hub, a Source that notifies, a Destination that follows"
work2=$(mktemp -d); dirs+=("$work2")
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
hubport=$(free); siteport=$(free); cbport=$(free)
hub="http://127.0.0.1:$hubport/"
site2="http://127.0.0.1:$siteport/"
cp -r examples/resources "$work2/resources"
resourcesync hub --port "$hubport" --db "$work2/hub.sqlite" --allow-loopback --log-level warning &
hubpid=$!; pids+=("$hubpid")
resourcesync publish "$work2/resources" --base-url "${site2}files/" --out "$work2/public" --hub "$hub"
resourcesync serve "$work2/public" --port "$siteport" --log-level warning &
sitepid=$!; pids+=("$sitepid")
python3 - "$site2" "$hub" <<'WAIT'
import sys, time, urllib.request
for url in sys.argv[1:]:
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            time.sleep(0.1)
WAIT
resourcesync sync "$site2" "$work2/copy" --follow --listen "127.0.0.1:$cbport" --delete &
followpid=$!; pids+=("$followpid")
python3 - "$work2/copy/files/data/people.csv" <<'WAIT'
import os, sys, time
for _ in range(200):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.05)
time.sleep(1.0)  # the subscription is verified just after the first sync
WAIT
echo "4,Grace,Arlington" >> "$work2/resources/data/people.csv"
start=$(date +%s.%N)
resourcesync publish "$work2/resources" --base-url "${site2}files/" --out "$work2/public" --hub "$hub"
python3 - "$work2/copy/files/data/people.csv" "$start" <<'WAIT'
import sys, time
for _ in range(400):
    if "Grace" in open(sys.argv[1], encoding="utf-8").read():
        print(f"the change arrived at the follower {time.time() - float(sys.argv[2]):.2f} s after publish began")
        break
    time.sleep(0.02)
else:
    sys.exit("the followed change did not arrive")
WAIT
tail -2 "$work2/copy/files/data/people.csv"
kill -TERM "$followpid" 2>/dev/null || true; wait "$followpid" 2>/dev/null || true
kill "$hubpid" "$sitepid" 2>/dev/null || true; wait "$hubpid" "$sitepid" 2>/dev/null || true

step "LIRS: an EUC-JP antenna feed (encoding detected), converted to a Change List and validated"
resourcesync lirs cat examples/lirs/antenna.eucjp.lirs
out=$(mktemp -d); dirs+=("$out")
resourcesync lirs to-resourcesync examples/lirs/antenna.eucjp.lirs -o "$out/changelist.xml" \
  --capability-list http://antenna.example.jp/capabilitylist.xml --json
resourcesync validate "$out/changelist.xml"
resourcesync lirs from-resourcesync "$out/changelist.xml" -o "$out/back.lirs.gz" --json
rm -rf "$out"

step "Done"
