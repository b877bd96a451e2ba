#!/usr/bin/env bash
# Starts a throwaway single-node Ceph cluster (one monitor, one memstore OSD)
# and a RADOS Gateway on 127.0.0.1:7480, all state under one folder, and
# creates an S3 user. Prints the environment the S3 tests read.
#   test/s3/ceph-start.sh DIR      (stop with test/s3/ceph-stop.sh DIR)
# A second cluster beside CI's: CEPH_RGW_PORT=7580 CEPH_MON_V2_PORT=3400 CEPH_MON_V1_PORT=6889
set -euo pipefail
D=${1:?usage: ceph-start.sh DIR}
PORT=${CEPH_RGW_PORT:-7480}
MON="[v2:127.0.0.1:${CEPH_MON_V2_PORT:-3300},v1:127.0.0.1:${CEPH_MON_V1_PORT:-6789}]"
ACCESS=agentbaktestaccess
SECRET=agentbaktestsecretkey0123456789abcdef
rm -rf "$D"
mkdir -p "$D"/{mon,osd,rgw,run,log}
FSID=$(cat /proc/sys/kernel/random/uuid)
CONF="$D/ceph.conf"
cat > "$CONF" <<CONF
[global]
fsid = $FSID
mon host = $MON
public network = 127.0.0.0/8
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc secure
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
paxos propose interval = 0.05
mon data avail crit = 0
mon data avail warn = 0
mon warn on pool no redundancy = false
run dir = $D/run
pid file = $D/run/\$name.pid
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
keyring = $D/keyring
osd objectstore = memstore
memstore device bytes = 8589934592
osd data = $D/osd/\$cluster-\$id
mon data = $D/mon/\$cluster-\$id
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
rgw data = $D/rgw
rgw enable usage log = false
CONF
T="timeout 60"
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --addv a "$MON" --fsid "$FSID" "$D/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon -c "$CONF" -i a
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$($T ceph -c "$CONF" osd new "$OSD_UUID")
mkdir -p "$D/osd/ceph-$OSD_ID"
ceph-osd -c "$CONF" -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" >/dev/null 2>&1
ceph-osd -c "$CONF" -i "$OSD_ID"
for i in $(seq 1 60); do
  $T ceph -c "$CONF" osd stat 2>/dev/null | grep -q "1 up" && break
  sleep 0.5
done
radosgw -c "$CONF" -n client.rgw.a
for i in $(seq 1 120); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.5
done
$T radosgw-admin -c "$CONF" user create --uid=agentbak --display-name=agentbak --access-key="$ACCESS" --secret-key="$SECRET" >/dev/null
echo "AGENTBAK_TEST_S3_ENDPOINT=http://127.0.0.1:$PORT"
echo "AWS_ACCESS_KEY_ID=$ACCESS"
echo "AWS_SECRET_ACCESS_KEY=$SECRET"
echo "AWS_REGION=us-east-1"
