#!/bin/sh
# The etcd roles of a gtd fleet (docs/operations.md, "Securing etcd"), for a cluster whose users
# are on or about to be: run once with etcdctl's settings in its environment (ETCDCTL_ENDPOINTS,
# ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, and ETCDCTL_USER=root:... once users are on).
#
#   gtd-push  `gtd push`, `gtd fleet` and `gtd fleet forget`: read and write under PREFIX/.
#   gtd-node  `gtd run --etcd`: read under PREFIX/; write its registry entry (PREFIX/nodes/),
#             its expected record and the departures it sees (PREFIX/expected/), and the
#             compaction rounds (PREFIX/compaction).
#   gtd-ramp  besides gtd-node, for the nodes that may drive a `gtd push --ramp`: the ramp's
#             record (PREFIX/ramp), its owner (PREFIX/ramp-owner) and the revisions each step
#             publishes (PREFIX/revision, PREFIX/revisions/). A node with it can publish a
#             config to the fleet, as a pusher can: grant it to the nodes you trust with that,
#             or to none (a stored ramp then waits for a node that may drive it).
#
# Then give each user its role, e.g.:
#   etcdctl user add pusher && etcdctl user grant-role pusher gtd-push
#   etcdctl user add node   && etcdctl user grant-role node gtd-node
#   etcdctl user grant-role node gtd-ramp
set -eu
PREFIX=${1:-/gtd}
etcdctl role add gtd-push
etcdctl role grant-permission gtd-push --prefix=true readwrite "$PREFIX/"
etcdctl role add gtd-node
etcdctl role grant-permission gtd-node --prefix=true read "$PREFIX/"
etcdctl role grant-permission gtd-node --prefix=true readwrite "$PREFIX/nodes/"
etcdctl role grant-permission gtd-node --prefix=true readwrite "$PREFIX/expected/"
etcdctl role grant-permission gtd-node readwrite "$PREFIX/compaction"
etcdctl role add gtd-ramp
etcdctl role grant-permission gtd-ramp readwrite "$PREFIX/ramp"
etcdctl role grant-permission gtd-ramp readwrite "$PREFIX/ramp-owner"
etcdctl role grant-permission gtd-ramp readwrite "$PREFIX/revision"
etcdctl role grant-permission gtd-ramp --prefix=true readwrite "$PREFIX/revisions/"
