#!/usr/bin/env bash
# Stops the daemons started by ceph-start.sh (by their pid files) and removes DIR.
D=${1:?usage: ceph-stop.sh DIR}
for p in "$D"/run/*.pid; do
  [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null
done
sleep 1
for p in "$D"/run/*.pid; do
  [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
done
rm -rf "$D"
exit 0
